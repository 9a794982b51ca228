#pragma once

// Host-side references for the builtin kernels (docs/kernel-abi.md): typed host tensors, seeded
// random inputs, broadcasting index math and the scalar rules of the ABI (integer arithmetic
// wraps, integer x / 0 == 0, MIN / -1 == MIN, float max/min propagate NaN, cast saturates).

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/elem_type.h"
#include "tests/integration/integration_test.h"

namespace cubed::integration {

// The element types with a native C++ type, which the generic tests below run on; the 8/16-bit
// and bool types have their own test (kernels_small_types_test.cc).
inline constexpr ElemType kNativeElemTypes[] = {ElemType::kF32, ElemType::kF64, ElemType::kI32,
                                                ElemType::kU32, ElemType::kI64};

// Calls `f(T{})` with the C++ type of `t`, one of kNativeElemTypes (any other fails the test).
template <typename F>
void WithType(ElemType t, F&& f) {
  switch (t) {
    case ElemType::kF32:
      return f(float{});
    case ElemType::kF64:
      return f(double{});
    case ElemType::kI32:
      return f(int32_t{});
    case ElemType::kU32:
      return f(uint32_t{});
    case ElemType::kI64:
      return f(int64_t{});
    default:
      ADD_FAILURE() << "WithType: " << ElemTypeName(t) << " has no native C++ type";
  }
}

template <typename T>
constexpr ElemType ElemTypeOf() {
  if constexpr (std::is_same_v<T, float>) return ElemType::kF32;
  if constexpr (std::is_same_v<T, double>) return ElemType::kF64;
  if constexpr (std::is_same_v<T, int32_t>) return ElemType::kI32;
  if constexpr (std::is_same_v<T, uint32_t>) return ElemType::kU32;
  return ElemType::kI64;
}

// A dense row-major tensor on the host.
template <typename T>
struct HostTensor {
  std::vector<uint64_t> shape;
  std::vector<T> data;
};

// Random values in [lo, hi]: uniform reals for floats, uniform integers otherwise.
template <typename T>
HostTensor<T> RandomTensor(std::mt19937_64& rng, std::vector<uint64_t> shape, double lo,
                           double hi) {
  HostTensor<T> t{std::move(shape), {}};
  t.data.resize(NumElements(t.shape));
  for (T& v : t.data) {
    if constexpr (std::is_floating_point_v<T>) {
      v = static_cast<T>(std::uniform_real_distribution<double>(lo, hi)(rng));
    } else {
      v = static_cast<T>(std::uniform_int_distribution<int64_t>(static_cast<int64_t>(lo),
                                                                static_cast<int64_t>(hi))(rng));
    }
  }
  return t;
}

// Row-major strides of a dense shape.
inline std::vector<uint64_t> DenseStrides(const std::vector<uint64_t>& shape) {
  std::vector<uint64_t> s(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
  return s;
}

// Multi-index of dense row-major element `i` of `shape`.
inline std::vector<uint64_t> Unflatten(uint64_t i, const std::vector<uint64_t>& shape) {
  std::vector<uint64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return idx;
}

// Dense offset in `shape` of multi-index `idx`, with dims of extent 1 broadcast (index 0).
inline uint64_t BroadcastOffset(const std::vector<uint64_t>& idx,
                                const std::vector<uint64_t>& shape) {
  uint64_t off = 0;
  for (size_t d = 0; d < shape.size(); ++d) off = off * shape[d] + (shape[d] == 1 ? 0 : idx[d]);
  return off;
}

// The ABI's arithmetic: integers wrap, x / 0 == 0, MIN / -1 == MIN.
template <typename T>
T WrapOp(T a, T b, char op) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    switch (op) {
      case '+':
        return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
      case '-':
        return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
      case '*':
        return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
      case '/':
        if (b == 0) return 0;
        if constexpr (std::is_signed_v<T>) {
          if (a == std::numeric_limits<T>::min() && b == T(-1)) return a;
        }
        return a / b;
    }
  } else {
    switch (op) {
      case '+':
        return a + b;
      case '-':
        return a - b;
      case '*':
        return a * b;
      case '/':
        return a / b;
    }
  }
  return T{};
}

// cast's conversion rules: float -> int truncates, NaN -> 0, out of range saturates; otherwise
// static_cast (integers wrap).
template <typename To, typename From>
To CastValue(From x) {
  if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
    if (std::isnan(x)) return 0;
    const double d = static_cast<double>(x);
    if (d >= static_cast<double>(std::numeric_limits<To>::max()) + 1.0) {
      return std::numeric_limits<To>::max();
    }
    if (d <= static_cast<double>(std::numeric_limits<To>::min()) - 1.0) {
      return std::numeric_limits<To>::min();
    }
    return static_cast<To>(x);
  } else {
    return static_cast<To>(x);
  }
}

// Compares `got` with `want` element by element: exactly for integers, within
// abs_tol + rel_tol * |want| for floats (NaN matches NaN). Reports the first few mismatches.
template <typename T>
void ExpectNear(const std::vector<T>& got, const std::vector<T>& want, double rel_tol = 1e-5,
                double abs_tol = 1e-6) {
  ASSERT_EQ(got.size(), want.size());
  int reported = 0;
  for (size_t i = 0; i < got.size() && reported < 5; ++i) {
    bool ok;
    if constexpr (std::is_floating_point_v<T>) {
      ok = (std::isnan(got[i]) && std::isnan(want[i])) || got[i] == want[i] ||
           std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i])) <=
               abs_tol + rel_tol * std::fabs(static_cast<double>(want[i]));
    } else {
      ok = got[i] == want[i];
    }
    if (!ok) {
      ++reported;
      ADD_FAILURE() << "element " << i << ": got " << +got[i] << ", want " << +want[i];
    }
  }
}

// Tolerances suited to T: tight for f64, looser for f32.
template <typename T>
double RelTol() {
  return std::is_same_v<T, float> ? 1e-5 : 1e-12;
}

// Uploads a host tensor; fails the test on error.
template <typename T>
Tensor Upload(Client& client, const HostTensor<T>& t) {
  auto r = client.CreateTensor(ToBytes(t.data), t.shape, sizeof(T));
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : Tensor{};
}

// An uninitialized output tensor; fails the test on error.
inline Tensor Output(Client& client, std::vector<uint64_t> shape, uint32_t elem_size) {
  auto r = client.EmptyTensor(std::move(shape), elem_size);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : Tensor{};
}

// Reads a tensor back as values of T.
template <typename T>
std::vector<T> Download(Client& client, const Tensor& t) {
  return FromBytes<T>(ReadTensorOrDie(client, t));
}

// "[2, 3]"
inline std::string ShapeString(const std::vector<uint64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// One scalar group holding `value` as type `t`.
inline Scalars ScalarOf(ElemType t, double value) {
  Scalars s;
  s.elem = t;
  if (IsFloat(t)) {
    s.floats = {value};
  } else if (!IsSigned(t)) {
    s.uints = {static_cast<uint64_t>(value)};
  } else {
    s.ints = {static_cast<int64_t>(value)};
  }
  return s;
}

}  // namespace cubed::integration
