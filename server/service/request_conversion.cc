#include "server/service/request_conversion.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/algorithm/container.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "common/elem_type.h"
#include "common/half.h"
#include "common/kernel_metadata.h"
#include "common/status_macros.h"

namespace cubed {
namespace {

constexpr uint64_t kMaxBytes = uint64_t{1} << 63;

template <typename T>
void AppendLittleEndian(T value, kernels::ScalarBytes& out) {
  uint8_t bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // x86-64 and aarch64 are little-endian.
  out.insert(out.end(), bytes, bytes + sizeof(T));
}

}  // namespace

absl::Status AppendScalarGroup(const ScalarGroupFields& group, int index,
                               kernels::ScalarGroups& groups) {
  // The field name is built only for an error: no allocation per command on the happy path.
  const auto field = [index] { return absl::StrCat("bindings.scalars[", index, "]"); };
  kernels::ScalarGroup out;
  {
    absl::StatusOr<ElemType> elem = ElemTypeFromWire(group.elem, "");
    if (!elem.ok()) return ElemTypeFromWire(group.elem, absl::StrCat(field(), ".elem")).status();
    out.elem = *elem;
  }
  const absl::string_view name = ElemTypeName(out.elem);
  const bool wants_floats = IsFloat(out.elem);
  const bool wants_uints = !wants_floats && !IsSigned(out.elem);  // u8, u16, u32, bool.
  const bool wants_ints = !wants_floats && !wants_uints;
  if ((!wants_floats && !group.floats.empty()) || (!wants_ints && !group.ints.empty()) ||
      (!wants_uints && !group.uints.empty())) {
    return absl::InvalidArgumentError(absl::StrCat(field(), ": ", name, " scalars go in `",
                                                   wants_floats ? "floats"
                                                   : wants_ints ? "ints"
                                                                : "uints",
                                                   "`; other value lists must be empty"));
  }
  // Values go in as little-endian elements of the type: floats rounded to nearest (f16/bf16 once,
  // from the double), integers range-checked against the type, bool 0 or 1.
  const uint32_t size = ElemSize(out.elem);
  for (const double f : group.floats) {
    if (out.elem == ElemType::kF32) {
      AppendLittleEndian(static_cast<float>(f), out.bytes);
    } else if (out.elem == ElemType::kF16) {
      AppendLittleEndian(Half(f).bits, out.bytes);
    } else if (out.elem == ElemType::kBF16) {
      AppendLittleEndian(BFloat16(f).bits, out.bytes);
    } else {
      AppendLittleEndian(f, out.bytes);
    }
  }
  for (size_t i = 0; i < group.ints.size(); ++i) {
    const int64_t v = group.ints[i];
    if (size < 8) {
      const int64_t hi = (int64_t{1} << (8 * size - 1)) - 1;
      if (v < -hi - 1 || v > hi) {
        return absl::InvalidArgumentError(
            absl::StrCat(field(), ".ints[", i, "] = ", v, " does not fit in ", name));
      }
    }
    const uint64_t bits = static_cast<uint64_t>(v);
    for (uint32_t b = 0; b < size; ++b) out.bytes.push_back(static_cast<uint8_t>(bits >> (8 * b)));
  }
  for (size_t i = 0; i < group.uints.size(); ++i) {
    const uint64_t v = group.uints[i];
    const uint64_t hi = out.elem == ElemType::kBool ? 1 : (uint64_t{1} << (8 * size)) - 1;
    if (v > hi) {
      return absl::InvalidArgumentError(
          absl::StrCat(field(), ".uints[", i, "] = ", v, " does not fit in ", name,
                       out.elem == ElemType::kBool ? " (0 or 1)" : ""));
    }
    for (uint32_t b = 0; b < size; ++b) out.bytes.push_back(static_cast<uint8_t>(v >> (8 * b)));
  }
  // A search over the groups so far, not a table indexed by the type's wire value: there are at
  // most as many groups as element types, and no table to outgrow when a type is added.
  if (absl::c_any_of(groups, [&](const kernels::ScalarGroup& g) { return g.elem == out.elem; })) {
    return absl::InvalidArgumentError(absl::StrCat(field(), ": a second group of ", name,
                                                   " scalars; put all of them in one group"));
  }
  groups.push_back(std::move(out));
  return absl::OkStatus();
}

absl::Status ToBuiltinCall(const BuiltinKernelFields& b, kernels::BuiltinCall& call) {
  if (b.name.empty() || b.name.size() > 64) {
    return absl::InvalidArgumentError(
        "kernel.builtin.name: must be 1 .. 64 characters (e.g. \"add\")");
  }
  call.name = std::string(b.name);
  ASSIGN_OR_RETURN(call.dtype, ElemTypeFromWire(b.dtype, "kernel.builtin.dtype"));
  if (b.out_dtype == v1::ELEM_TYPE_UNSPECIFIED) {
    if (b.name == "cast") {
      return absl::InvalidArgumentError("kernel.builtin.out_dtype: required for cast");
    }
    call.out_dtype = call.dtype;
  } else {
    ASSIGN_OR_RETURN(call.out_dtype, ElemTypeFromWire(b.out_dtype, "kernel.builtin.out_dtype"));
  }
  call.axis = b.axis;
  call.allow_tf32 = b.allow_tf32;                    // Validation checks where it applies.
  if (b.index_dtype != v1::ELEM_TYPE_UNSPECIFIED) {  // Validation checks i32 or i64.
    ASSIGN_OR_RETURN(call.index_dtype,
                     ElemTypeFromWire(b.index_dtype, "kernel.builtin.index_dtype"));
  }
  return absl::OkStatus();
}

absl::Status CheckExecuteFields(int mode, size_t buffers, size_t metadata_words,
                                const RequestLimits& limits, ExecuteCommand& command) {
  switch (mode) {
    case v1::EXECUTION_MODE_UNSPECIFIED:
    case v1::EXECUTION_MODE_CHECKED:
      break;
    case v1::EXECUTION_MODE_UNCHECKED:
      command.unchecked = true;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("mode: ", mode, " is not an ExecutionMode"));
  }
  if (buffers > limits.max_buffers) {
    return absl::InvalidArgumentError(
        absl::StrCat("bindings.buffers: ", buffers, " given; at most ", limits.max_buffers));
  }
  if (metadata_words > limits.max_metadata_words) {
    return absl::InvalidArgumentError(absl::StrCat("bindings.metadata: ", metadata_words,
                                                   " words; at most ", limits.max_metadata_words));
  }
  return absl::OkStatus();
}

namespace {

absl::Status CheckCubeDim(const v1::CubeDim& dim, absl::string_view field) {
  const uint64_t x = dim.x(), y = dim.y(), z = dim.z();
  if (x < 1 || x > 1024 || y < 1 || y > 1024 || z < 1 || z > 64 || x * y * z > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " = (", x, ", ", y, ", ", z,
                     ") is invalid: each of x, y >= 1 and <= 1024, z 1 .. 64, x*y*z <= 1024"));
  }
  return absl::OkStatus();
}

// Fills `call` (default-constructed) from `kernel`.
absl::Status ToKernelCall(const v1::Kernel& kernel, const RequestLimits& limits, KernelCall& call) {
  switch (kernel.kind_case()) {
    case v1::Kernel::kBuiltin: {
      const v1::BuiltinKernel& b = kernel.builtin();
      return ToBuiltinCall(
          {b.name(), b.dtype(), b.out_dtype(), b.axis(), b.index_dtype(), b.allow_tf32()},
          call.builtin);
    }
    case v1::Kernel::kCudaSource:
    case v1::Kernel::kPtx: {
      const bool is_ptx = kernel.kind_case() == v1::Kernel::kPtx;
      const std::string field = is_ptx ? "kernel.ptx" : "kernel.cuda_source";
      const std::string& code = is_ptx ? kernel.ptx().ptx() : kernel.cuda_source().source();
      const std::string& entry =
          is_ptx ? kernel.ptx().entry_point() : kernel.cuda_source().entry_point();
      const v1::CubeDim& dim = is_ptx ? kernel.ptx().cube_dim() : kernel.cuda_source().cube_dim();
      if (code.empty() || code.size() > limits.max_code_bytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, ": code must be 1 .. ", limits.max_code_bytes, " bytes, got ", code.size()));
      }
      if (entry.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(field, ".entry_point: required"));
      }
      RETURN_IF_ERROR(CheckCubeDim(dim, absl::StrCat(field, ".cube_dim")));
      call.is_builtin = false;
      call.cuda.is_ptx = is_ptx;
      call.cuda.code = code;
      call.cuda.entry_point = entry;
      call.cuda.cube_dim[0] = dim.x();
      call.cuda.cube_dim[1] = dim.y();
      call.cuda.cube_dim[2] = dim.z();
      call.cuda.shared_memory_bytes =
          is_ptx ? kernel.ptx().shared_memory_bytes() : kernel.cuda_source().shared_memory_bytes();
      if (!is_ptx) {
        for (const std::string& o : kernel.cuda_source().options()) call.cuda.options.push_back(o);
      }
      return absl::OkStatus();
    }
    case v1::Kernel::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      "kernel: no kernel set (expected one of builtin, cuda_source, ptx)");
}

}  // namespace

absl::StatusOr<uint64_t> CheckTensorShape(absl::Span<const uint64_t> shape, uint32_t elem_size,
                                          absl::string_view field) {
  if (shape.empty() || shape.size() > kMaxRank) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".shape: ", shape.size(), " dimensions; expected 1 .. ", kMaxRank));
  }
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".shape[", i, "] is 0; extents must be >= 1"));
    }
  }
  if (elem_size < 1 || elem_size > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".elem_size: ", elem_size, " is outside 1 .. 16"));
  }
  absl::StatusOr<uint64_t> bytes = TensorBytes(shape, elem_size, field);
  if (!bytes.ok() || *bytes >= kMaxBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".shape: the product of the shape times elem_size overflows 63 bits"));
  }
  return *bytes;
}

absl::StatusOr<ImportCommand> ToImportCommand(const v1::ImportMemoryRequest& request) {
  ImportCommand command;
  switch (request.source_case()) {
    case v1::ImportMemoryRequest::kRegion:
      command.from_region = true;
      command.region = RegionRange{RegionId(request.region().region()), request.region().offset(),
                                   request.region().size()};
      return command;
    case v1::ImportMemoryRequest::kCudaIpc:
      command.ipc_handle = request.cuda_ipc().ipc_handle();
      command.offset = request.cuda_ipc().offset();
      command.size = request.cuda_ipc().size();
      command.device_uuid = request.cuda_ipc().device_uuid();
      return command;
    default:
      return absl::InvalidArgumentError(
          "source: neither cuda_ipc nor region is set; an import needs one");
  }
}

BindingRef ToBindingRef(const v1::Binding& binding) {
  return BindingRef{HandleId(binding.handle()), binding.offset_start(), binding.offset_end()};
}

absl::StatusOr<std::vector<BindingRef>> ToReadBindings(const v1::ReadRequest& request,
                                                       const RequestLimits& limits) {
  if (request.bindings_size() == 0 ||
      static_cast<uint32_t>(request.bindings_size()) > limits.max_bindings) {
    return absl::InvalidArgumentError(absl::StrCat("bindings: ", request.bindings_size(),
                                                   " given; expected 1 .. ", limits.max_bindings));
  }
  std::vector<BindingRef> out;
  out.reserve(request.bindings_size());
  for (const v1::Binding& b : request.bindings()) out.push_back(ToBindingRef(b));
  return out;
}

absl::StatusOr<std::vector<TensorRef>> ToTensorRefs(const v1::ReadTensorRequest& request,
                                                    const RequestLimits& limits) {
  if (request.bindings_size() == 0 ||
      static_cast<uint32_t>(request.bindings_size()) > limits.max_bindings) {
    return absl::InvalidArgumentError(absl::StrCat("bindings: ", request.bindings_size(),
                                                   " given; expected 1 .. ", limits.max_bindings));
  }
  std::vector<TensorRef> out;
  for (int i = 0; i < request.bindings_size(); ++i) {
    const v1::BindingWithMeta& b = request.bindings(i);
    const std::string field = absl::StrCat("bindings[", i, "]");
    TensorRef t;
    t.binding = ToBindingRef(b.binding());
    t.shape.assign(b.shape().begin(), b.shape().end());
    t.strides.assign(b.strides().begin(), b.strides().end());
    t.elem_size = b.elem_size();
    RETURN_IF_ERROR(CheckTensorShape(t.shape, t.elem_size, field).status());
    if (t.strides.size() != t.shape.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".strides: ", t.strides.size(), " strides for ", t.shape.size(), " dimensions"));
    }
    out.push_back(std::move(t));
  }
  return out;
}

absl::Status ToExecuteCommand(const v1::Kernel& kernel, const v1::CubeCount& count,
                              const v1::Bindings& b, int mode, const RequestLimits& limits,
                              ExecuteCommand& command) {
  RETURN_IF_ERROR(ToKernelCall(kernel, limits, command.kernel));
  switch (count.kind_case()) {
    case v1::CubeCount::kStaticCount:
      command.count[0] = count.static_count().x();
      command.count[1] = count.static_count().y();
      command.count[2] = count.static_count().z();
      break;
    case v1::CubeCount::kDynamic:
      command.dynamic_count = true;
      command.count_binding = ToBindingRef(count.dynamic());
      break;
    case v1::CubeCount::KIND_NOT_SET:
      return absl::InvalidArgumentError("count: no cube count set (static_count or dynamic)");
  }
  RETURN_IF_ERROR(CheckExecuteFields(mode, static_cast<size_t>(b.buffers_size()),
                                     static_cast<size_t>(b.metadata_size()), limits, command));
  command.buffers.reserve(b.buffers_size());
  for (const v1::Binding& buffer : b.buffers()) command.buffers.push_back(ToBindingRef(buffer));
  // Metadata and scalars travel in the builtin call for every kind of kernel: client CUDA
  // kernels receive them too (docs/kernel-abi.md).
  command.kernel.builtin.metadata.assign(b.metadata().begin(), b.metadata().end());
  command.kernel.builtin.scalars.reserve(b.scalars_size());
  for (int i = 0; i < b.scalars_size(); ++i) {
    const v1::ScalarGroup& group = b.scalars(i);
    RETURN_IF_ERROR(AppendScalarGroup({group.elem(), group.floats(), group.ints(), group.uints()},
                                      i, command.kernel.builtin.scalars));
  }
  return absl::OkStatus();
}

absl::StatusOr<ExecuteCommand> ToExecuteCommand(const v1::ExecuteRequest& request,
                                                const RequestLimits& limits) {
  ExecuteCommand command;
  RETURN_IF_ERROR(ToExecuteCommand(request.kernel(), request.count(), request.bindings(),
                                   request.mode(), limits, command));
  return command;
}

absl::Status CheckCreateTensor(const v1::CreateTensorRequest& request) {
  const std::vector<uint64_t> shape(request.shape().begin(), request.shape().end());
  ASSIGN_OR_RETURN(uint64_t bytes, CheckTensorShape(shape, request.elem_size(), "create_tensor"));
  if (request.data().size() != bytes) {
    return absl::InvalidArgumentError(absl::StrCat("data: ", request.data().size(),
                                                   " bytes given, but shape and elem_size need ",
                                                   bytes, " (product(shape) * elem_size)"));
  }
  return absl::OkStatus();
}

absl::Status CheckRelease(const v1::ReleaseRequest& request, const RequestLimits& limits) {
  if (request.handles_size() == 0 ||
      static_cast<uint32_t>(request.handles_size()) > limits.max_release) {
    return absl::InvalidArgumentError(absl::StrCat("handles: ", request.handles_size(),
                                                   " given; expected 1 .. ", limits.max_release));
  }
  return absl::OkStatus();
}

}  // namespace cubed
