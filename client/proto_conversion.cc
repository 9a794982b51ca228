#include "client/proto_conversion.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace cubed {
namespace {

v1::ElemType ToWire(ElemType t) { return static_cast<v1::ElemType>(static_cast<int>(t)); }

}  // namespace

absl::Status CheckBinding(const Binding& binding) {
  if (!binding.handle) return absl::InvalidArgumentError("binding has an empty handle");
  return absl::OkStatus();
}

v1::ExecutionMode ToWire(ExecutionMode mode) {
  return mode == ExecutionMode::kUnchecked ? v1::EXECUTION_MODE_UNCHECKED
                                           : v1::EXECUTION_MODE_CHECKED;
}

absl::Status ToProto(const Binding& binding, v1::Binding* out) {
  RETURN_IF_ERROR(CheckBinding(binding));
  out->set_handle(binding.handle.id());
  out->set_offset_start(binding.offset_start);
  out->set_offset_end(binding.offset_end);
  return absl::OkStatus();
}

absl::Status ToProto(const Tensor& tensor, v1::BindingWithMeta* out) {
  if (!tensor.handle) return absl::InvalidArgumentError("tensor has an empty handle");
  if (tensor.shape.size() != tensor.strides.size()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor has ", tensor.shape.size(),
                                                   " shape dimensions but ", tensor.strides.size(),
                                                   " strides"));
  }
  v1::Binding* b = out->mutable_binding();
  b->set_handle(tensor.handle.id());
  out->mutable_shape()->Add(tensor.shape.begin(), tensor.shape.end());
  out->mutable_strides()->Add(tensor.strides.begin(), tensor.strides.end());
  out->set_elem_size(tensor.elem_size);
  return absl::OkStatus();
}

absl::Status CheckScalarLists(const Scalars& scalars) {
  const bool float_type = IsFloat(scalars.elem);
  const bool uint_type = !float_type && !IsSigned(scalars.elem);  // u8, u16, u32, bool.
  const bool int_type = !float_type && !uint_type;
  if ((!float_type && !scalars.floats.empty()) || (!int_type && !scalars.ints.empty()) ||
      (!uint_type && !scalars.uints.empty())) {
    return absl::InvalidArgumentError(absl::StrCat("scalars of type ", ElemTypeName(scalars.elem),
                                                   " must use only the ",
                                                   float_type  ? "floats"
                                                   : uint_type ? "uints"
                                                               : "ints",
                                                   " list"));
  }
  return absl::OkStatus();
}

absl::Status ToProto(const Scalars& scalars, v1::ScalarGroup* out) {
  RETURN_IF_ERROR(CheckScalarLists(scalars));
  out->set_elem(ToWire(scalars.elem));
  out->mutable_floats()->Add(scalars.floats.begin(), scalars.floats.end());
  out->mutable_ints()->Add(scalars.ints.begin(), scalars.ints.end());
  out->mutable_uints()->Add(scalars.uints.begin(), scalars.uints.end());
  return absl::OkStatus();
}

void ToProto(const BuiltinKernel& kernel, v1::BuiltinKernel* out) {
  out->set_name(kernel.name);
  out->set_dtype(ToWire(kernel.dtype));
  out->set_out_dtype(ToWire(kernel.out_dtype));
  out->set_axis(kernel.axis);
  out->set_index_dtype(ToWire(kernel.index_dtype));
  out->set_allow_tf32(kernel.allow_tf32);
}

MemoryUsage FromProto(const v1::MemoryUsage& usage) {
  MemoryUsage u;
  u.number_allocs = usage.number_allocs();
  u.bytes_in_use = usage.bytes_in_use();
  u.bytes_padding = usage.bytes_padding();
  u.bytes_reserved = usage.bytes_reserved();
  return u;
}

}  // namespace cubed
