#include "common/elem_type.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace cubed {

absl::string_view ElemTypeName(ElemType t) {
  switch (t) {
    case ElemType::kF32:
      return "f32";
    case ElemType::kF64:
      return "f64";
    case ElemType::kI32:
      return "i32";
    case ElemType::kU32:
      return "u32";
    case ElemType::kI64:
      return "i64";
    case ElemType::kF16:
      return "f16";
    case ElemType::kBF16:
      return "bf16";
    case ElemType::kI8:
      return "i8";
    case ElemType::kU8:
      return "u8";
    case ElemType::kI16:
      return "i16";
    case ElemType::kU16:
      return "u16";
    case ElemType::kBool:
      return "bool";
  }
  return "unknown";
}

absl::StatusOr<ElemType> ParseElemType(absl::string_view name) {
  for (ElemType t : kAllElemTypes) {
    if (ElemTypeName(t) == name) return t;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown element type '", name.substr(0, 100),
                   "' (expected f32, f64, i32, u32, i64, f16, bf16, i8, u8, i16, u16 or bool)"));
}

absl::StatusOr<ElemType> ElemTypeFromWire(int value, absl::string_view field) {
  for (ElemType t : kAllElemTypes) {
    if (static_cast<int>(t) == value) return t;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": element type ", value,
                   " is not one of F32, F64, I32, U32, I64, F16, BF16, I8, U8, I16, U16, BOOL"));
}

}  // namespace cubed
