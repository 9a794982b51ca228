#include "kernels/builtin_test_util.h"

#include <cstring>
#include <utility>

#include "common/half.h"
#include "common/kernel_metadata.h"

namespace cubed::kernels::testing {

BuiltinCall MakeCall(std::string name, ElemType dtype) {
  BuiltinCall call;
  call.name = std::move(name);
  call.dtype = dtype;
  call.out_dtype = dtype;
  return call;
}

ScalarGroup OneScalar(ElemType elem, double value) {
  ScalarGroup g;
  g.elem = elem;
  g.bytes.resize(ElemSize(elem));
  uint8_t raw[8];
  switch (elem) {
    case ElemType::kF32: {
      const float v = static_cast<float>(value);
      std::memcpy(raw, &v, 4);
      break;
    }
    case ElemType::kF64:
      std::memcpy(raw, &value, 8);
      break;
    case ElemType::kI32: {
      const int32_t v = static_cast<int32_t>(value);
      std::memcpy(raw, &v, 4);
      break;
    }
    case ElemType::kU32: {
      const uint32_t v = static_cast<uint32_t>(value);
      std::memcpy(raw, &v, 4);
      break;
    }
    case ElemType::kI64: {
      const int64_t v = static_cast<int64_t>(value);
      std::memcpy(raw, &v, 8);
      break;
    }
    case ElemType::kF16: {
      const Half v(value);
      std::memcpy(raw, &v.bits, 2);
      break;
    }
    case ElemType::kBF16: {
      const BFloat16 v(value);
      std::memcpy(raw, &v.bits, 2);
      break;
    }
    case ElemType::kI8:
    case ElemType::kU8:
    case ElemType::kI16:
    case ElemType::kU16: {
      const int64_t v = static_cast<int64_t>(value);
      std::memcpy(raw, &v, 2);  // Little-endian: the low bytes.
      break;
    }
    case ElemType::kBool:
      raw[0] = value != 0 ? 1 : 0;
      break;
  }
  std::memcpy(g.bytes.data(), raw, g.bytes.size());
  return g;
}

std::vector<uint32_t> ContiguousMetadata(const std::vector<std::vector<uint64_t>>& shapes) {
  std::vector<uint64_t> lens;
  std::vector<TensorLayout> layouts;
  for (const auto& s : shapes) {
    layouts.push_back(TensorLayout::Contiguous(s));
    lens.push_back(layouts.back().NumElements());
  }
  return *EncodeKernelMetadata(lens, layouts);
}

BuiltinCall ContiguousCall(std::string name, ElemType dtype,
                           const std::vector<std::vector<uint64_t>>& shapes) {
  BuiltinCall call = MakeCall(std::move(name), dtype);
  call.metadata = kernels::ToMetadataWords(ContiguousMetadata(shapes));
  return call;
}

std::vector<uint64_t> ContiguousBytes(const std::vector<std::vector<uint64_t>>& shapes,
                                      uint64_t elem_size) {
  std::vector<uint64_t> b;
  for (const auto& s : shapes) b.push_back(TensorLayout::Contiguous(s).NumElements() * elem_size);
  return b;
}

}  // namespace cubed::kernels::testing
