#pragma once

// Element types known to cubed, independent of the wire format.

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cubed {

// Numbers match cubed.v1.ElemType so the service edge converts by cast after validation.
enum class ElemType : uint8_t {
  kF32 = 1,
  kF64 = 2,
  kI32 = 3,
  kU32 = 4,
  kI64 = 5,
};

inline constexpr ElemType kAllElemTypes[] = {ElemType::kF32, ElemType::kF64, ElemType::kI32,
                                             ElemType::kU32, ElemType::kI64};

// Bytes per element.
constexpr uint32_t ElemSize(ElemType t) {
  switch (t) {
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

constexpr bool IsFloat(ElemType t) { return t == ElemType::kF32 || t == ElemType::kF64; }
constexpr bool IsSigned(ElemType t) { return t != ElemType::kU32; }

// Lower-case name: "f32", "f64", "i32", "u32", "i64".
absl::string_view ElemTypeName(ElemType t);

// Parses a name as printed by ElemTypeName. INVALID_ARGUMENT naming the text when unknown.
absl::StatusOr<ElemType> ParseElemType(absl::string_view name);

// Converts a wire enum value; INVALID_ARGUMENT naming `field` when it is not a known type.
absl::StatusOr<ElemType> ElemTypeFromWire(int value, absl::string_view field);

}  // namespace cubed
