#pragma once

// Element conversion for "cast" (and wherever a wider accumulator is narrowed): C++ static_cast
// semantics where those are defined, and defined results where C++ leaves them undefined:
//   float -> integer: truncates toward zero; NaN gives 0; out-of-range values saturate to the
//                     target's min/max (so -1.5 -> u32 is 0, 1e10 -> i32 is INT32_MAX).
//   f64 -> f32:       rounds to nearest; beyond f32's range gives +-infinity (IEEE behaviour).
//   integer -> integer: wraps modulo 2^bits (two's complement).
//   anything -> f16/bf16: one rounding to nearest even from the exact value (common/half.h).
//   x -> bool:        x != 0 (NaN is true); bool -> x: 1 or 0.

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "common/half.h"

namespace cubed::kernels {

template <typename To, typename From>
inline To Convert(From x) {
  if constexpr (std::is_same_v<To, Bool8>) {
    return Bool8(static_cast<ComputeType<From>>(x) != 0);
  } else if constexpr (std::is_same_v<From, Bool8>) {
    return static_cast<To>(static_cast<bool>(x) ? 1 : 0);
  } else if constexpr (kIsHalf<From> && !kIsHalf<To>) {
    return Convert<To>(static_cast<float>(x));
  } else if constexpr (kIsFloat<From> && std::is_integral_v<To>) {
    if (std::isnan(x)) return 0;
    const double d = static_cast<double>(x);
    // max() + 1 is a power of two, exact in double. Values in (min - 1, max + 1) truncate to a
    // representable integer.
    constexpr double kUpper = static_cast<double>(std::numeric_limits<To>::max()) + 1.0;
    constexpr double kLower = static_cast<double>(std::numeric_limits<To>::min()) - 1.0;
    if (d >= kUpper) return std::numeric_limits<To>::max();
    if (d <= kLower) return std::numeric_limits<To>::min();
    return static_cast<To>(x);
  } else if constexpr (std::is_same_v<From, double> && std::is_same_v<To, float>) {
    // Doubles at or beyond 2^128 - 2^103 round to infinity; everything below rounds into range.
    constexpr double kOverflow = 340282356779733661637539395458142568448.0;  // 2^128 - 2^103
    if (x >= kOverflow) return std::numeric_limits<float>::infinity();
    if (x <= -kOverflow) return -std::numeric_limits<float>::infinity();
    return static_cast<float>(x);
  } else {
    return static_cast<To>(x);
  }
}

}  // namespace cubed::kernels
