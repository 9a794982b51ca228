#pragma once

// Calls a generic lambda with a value of the C++ type behind an ElemType:
//   return DispatchDtype<kAllTypes>(dtype, [&](auto tag) { using T = decltype(tag); ... });
// f16, bf16 and bool dispatch to Half, BFloat16 and Bool8 (common/half.h). Only the types in
// `kAllowed` are instantiated; others (validation already refused them) give INTERNAL.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/elem_type.h"
#include "common/half.h"
#include "kernels/kernel_def.h"

namespace cubed::kernels {

#define CUBED_DISPATCH_CASE(kType, CType)                                          \
  case ElemType::kType:                                                            \
    if constexpr ((kAllowed & DtypeBit(ElemType::kType)) != 0) return fn(CType{}); \
    break;

template <DtypeMask kAllowed, typename Fn>
absl::Status DispatchDtype(ElemType t, Fn&& fn) {
  switch (t) {
    CUBED_DISPATCH_CASE(kF32, float)
    CUBED_DISPATCH_CASE(kF64, double)
    CUBED_DISPATCH_CASE(kI32, int32_t)
    CUBED_DISPATCH_CASE(kU32, uint32_t)
    CUBED_DISPATCH_CASE(kI64, int64_t)
    CUBED_DISPATCH_CASE(kF16, Half)
    CUBED_DISPATCH_CASE(kBF16, BFloat16)
    CUBED_DISPATCH_CASE(kI8, int8_t)
    CUBED_DISPATCH_CASE(kU8, uint8_t)
    CUBED_DISPATCH_CASE(kI16, int16_t)
    CUBED_DISPATCH_CASE(kU16, uint16_t)
    CUBED_DISPATCH_CASE(kBool, Bool8)
  }
  return absl::InternalError(
      absl::StrCat("builtin kernel dispatched on unsupported dtype ", ElemTypeName(t)));
}

#undef CUBED_DISPATCH_CASE

}  // namespace cubed::kernels
