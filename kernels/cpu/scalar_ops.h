#pragma once

// Scalar semantics shared by the CPU kernels, free of undefined behaviour for every input:
// integer arithmetic wraps (computed in the unsigned type), integer division by zero gives 0 and
// MIN / -1 gives MIN, float max/min propagate NaN, f16 and bf16 compute in f32 and round once,
// bool max/min are or/and. docs/kernel-abi.md documents each rule.

#include <cmath>
#include <limits>
#include <type_traits>

#include "common/half.h"

namespace cubed::kernels {

// Unsigned counterpart of an integer type; floats map to themselves, f16 and bf16 to float.
// Types narrower than int wrap in unsigned int (their own unsigned type would promote to int).
template <typename T, bool = std::is_integral_v<T>>
struct WrapType {
  using type = std::make_unsigned_t<std::common_type_t<T, int>>;
};
template <typename T>
struct WrapType<T, false> {
  using type = ComputeType<T>;
};
template <typename T>
using Wrap = typename WrapType<T>::type;

template <typename T>
inline T Neg(T x) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(Wrap<T>{0} - static_cast<Wrap<T>>(x));
  } else {
    return static_cast<T>(-static_cast<ComputeType<T>>(x));
  }
}

template <typename T>
inline T Abs(T x) {
  if constexpr (std::is_integral_v<T>) {
    return x < 0 ? Neg(x) : x;
  } else {
    return static_cast<T>(std::fabs(static_cast<ComputeType<T>>(x)));
  }
}

template <typename T>
inline T Add(T a, T b) {
  return static_cast<T>(static_cast<Wrap<T>>(a) + static_cast<Wrap<T>>(b));
}

template <typename T>
inline T Sub(T a, T b) {
  return static_cast<T>(static_cast<Wrap<T>>(a) - static_cast<Wrap<T>>(b));
}

template <typename T>
inline T Mul(T a, T b) {
  return static_cast<T>(static_cast<Wrap<T>>(a) * static_cast<Wrap<T>>(b));
}

template <typename T>
inline T Div(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    if (b == 0) return 0;
    if constexpr (std::is_signed_v<T>) {
      if (a == std::numeric_limits<T>::min() && b == -1) return a;
    }
  }
  return static_cast<T>(static_cast<ComputeType<T>>(a) / static_cast<ComputeType<T>>(b));
}

template <typename T>
inline T Max(T a, T b) {
  if constexpr (std::is_same_v<T, Bool8>) return Bool8(a || b);
  if constexpr (kIsFloat<T>) {
    if (std::isnan(a)) return a;
    if (std::isnan(b)) return b;
  }
  return a < b ? b : a;
}

template <typename T>
inline T Min(T a, T b) {
  if constexpr (std::is_same_v<T, Bool8>) return Bool8(a && b);
  if constexpr (kIsFloat<T>) {
    if (std::isnan(a)) return a;
    if (std::isnan(b)) return b;
  }
  return b < a ? b : a;
}

}  // namespace cubed::kernels
