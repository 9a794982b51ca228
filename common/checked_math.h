#pragma once

// Overflow-safe 64-bit arithmetic for sizes, offsets and shapes that come from clients.

#include <cstdint>
#include <optional>

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

}  // namespace cubed
