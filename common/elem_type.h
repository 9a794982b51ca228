#pragma once

// Element types known to cubed, independent of the wire format.

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cubed {

// Numbers match cubed.v1.ElemType so the service edge converts by cast after validation.
// f16 is IEEE binary16, bf16 the top half of a binary32; bool is one byte, 0 false and any other
// byte true (kernels write 0 or 1).
enum class ElemType : uint8_t {
  kF32 = 1,
  kF64 = 2,
  kI32 = 3,
  kU32 = 4,
  kI64 = 5,
  kF16 = 6,
  kBF16 = 7,
  kI8 = 8,
  kU8 = 9,
  kI16 = 10,
  kU16 = 11,
  kBool = 12,
};

inline constexpr ElemType kAllElemTypes[] = {ElemType::kF32,  ElemType::kF64, ElemType::kI32,
                                             ElemType::kU32,  ElemType::kI64, ElemType::kF16,
                                             ElemType::kBF16, ElemType::kI8,  ElemType::kU8,
                                             ElemType::kI16,  ElemType::kU16, ElemType::kBool};

// Bytes per element.
constexpr uint32_t ElemSize(ElemType t) {
  switch (t) {
    case ElemType::kI8:
    case ElemType::kU8:
    case ElemType::kBool:
      return 1;
    case ElemType::kF16:
    case ElemType::kBF16:
    case ElemType::kI16:
    case ElemType::kU16:
      return 2;
    case ElemType::kF32:
    case ElemType::kI32:
    case ElemType::kU32:
      return 4;
    case ElemType::kF64:
    case ElemType::kI64:
      return 8;
  }
  return 0;
}

// f16 and bf16: stored in 16 bits, computed in f32.
constexpr bool IsHalf(ElemType t) { return t == ElemType::kF16 || t == ElemType::kBF16; }
constexpr bool IsFloat(ElemType t) {
  return t == ElemType::kF32 || t == ElemType::kF64 || IsHalf(t);
}
constexpr bool IsSigned(ElemType t) {
  return t != ElemType::kU32 && t != ElemType::kU8 && t != ElemType::kU16 && t != ElemType::kBool;
}

// Lower-case name: "f32", "f64", "i32", "u32", "i64", "f16", "bf16", "i8", "u8", "i16", "u16",
// "bool".
absl::string_view ElemTypeName(ElemType t);

// Parses a name as printed by ElemTypeName. INVALID_ARGUMENT naming the text when unknown.
absl::StatusOr<ElemType> ParseElemType(absl::string_view name);

// Converts a wire enum value; INVALID_ARGUMENT naming `field` when it is not a known type.
absl::StatusOr<ElemType> ElemTypeFromWire(int value, absl::string_view field);

}  // namespace cubed
