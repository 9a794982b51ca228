#pragma once

// Calls a generic lambda with a value of the C++ type behind an ElemType:
//   return DispatchDtype<kAllTypes>(dtype, [&](auto tag) { using T = decltype(tag); ... });
// Only the types in `kAllowed` are instantiated; others (validation already refused them) give
// INTERNAL.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/elem_type.h"
#include "kernels/kernel_def.h"

namespace cubed::kernels {

template <DtypeMask kAllowed, typename Fn>
absl::Status DispatchDtype(ElemType t, Fn&& fn) {
  switch (t) {
    case ElemType::kF32:
      if constexpr ((kAllowed & DtypeBit(ElemType::kF32)) != 0) return fn(float{});
      break;
    case ElemType::kF64:
      if constexpr ((kAllowed & DtypeBit(ElemType::kF64)) != 0) return fn(double{});
      break;
    case ElemType::kI32:
      if constexpr ((kAllowed & DtypeBit(ElemType::kI32)) != 0) return fn(int32_t{});
      break;
    case ElemType::kU32:
      if constexpr ((kAllowed & DtypeBit(ElemType::kU32)) != 0) return fn(uint32_t{});
      break;
    case ElemType::kI64:
      if constexpr ((kAllowed & DtypeBit(ElemType::kI64)) != 0) return fn(int64_t{});
      break;
  }
  return absl::InternalError(
      absl::StrCat("builtin kernel dispatched on unsupported dtype ", ElemTypeName(t)));
}

}  // namespace cubed::kernels
