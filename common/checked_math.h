#pragma once

// Overflow-safe 64-bit arithmetic for sizes, offsets and shapes that come from clients.
//
// Note [Checked client arithmetic]: every size, offset, count and shape a client sends is
// combined only through these functions (or a comparison that cannot wrap). An overflow is never
// turned into 0 or a clamp: the std::optional forms return nullopt, the Status forms an
// INVALID_ARGUMENT that names the field, and the caller fails the request with it. TensorBytes
// is the one way to size a tensor from its shape.

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace cubed {

// a + b, or nullopt when it overflows uint64.
inline std::optional<uint64_t> CheckedAdd(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// a * b, or nullopt when it overflows uint64.
inline std::optional<uint64_t> CheckedMul(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// Product of all values (1 for an empty span), or nullopt when it overflows uint64.
inline std::optional<uint64_t> CheckedProduct(absl::Span<const uint64_t> values) {
  uint64_t r = 1;
  for (uint64_t v : values) {
    if (__builtin_mul_overflow(r, v, &r)) return std::nullopt;
  }
  return r;
}

// `size` rounded up to a multiple of `alignment` (> 0), or nullopt on overflow.
inline std::optional<uint64_t> CheckedRoundUp(uint64_t size, uint64_t alignment) {
  uint64_t rem = size % alignment;
  if (rem == 0) return size;
  return CheckedAdd(size, alignment - rem);
}

// Bytes of a dense tensor: product(shape) * elem_size (elem_size for an empty shape).
// INVALID_ARGUMENT "`what`: ... overflows 64 bits" when it does not fit in uint64.
absl::StatusOr<uint64_t> TensorBytes(absl::Span<const uint64_t> shape, uint64_t elem_size,
                                     absl::string_view what);

// a + b, or INVALID_ARGUMENT "`what`: ... overflows 64 bits" (sums of client-sized parts).
absl::StatusOr<uint64_t> CheckedSum(uint64_t a, uint64_t b, absl::string_view what);

}  // namespace cubed
