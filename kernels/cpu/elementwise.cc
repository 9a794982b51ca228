#include "kernels/cpu/elementwise.h"

#include <cmath>
#include <type_traits>

#include "kernels/cpu/dtype_dispatch.h"
#include "kernels/cpu/parallel_for.h"
#include "kernels/cpu/scalar_ops.h"
#include "kernels/cpu/strided_loop.h"

namespace cubed::kernels {
namespace {

template <typename T>
T Sigmoid(T x) {
  // Both branches only ever exponentiate a non-positive number, so nothing overflows.
  if (x >= 0) return T{1} / (T{1} + std::exp(-x));
  const T e = std::exp(x);
  return e / (T{1} + e);
}

// Note [Activation tails]
// gelu, gelu_tanh and silu are x times a gate in [0, 1] that tends to 0 as x -> -inf. Each is
// written so that the gate never loses its digits to cancellation there, and -inf gives the
// limit -0 (the textbook formulas give -inf * 0 = NaN):
//   gelu(x)      = x * Phi(x)            = 0.5 * x * erfc(-x / sqrt(2))   (not 1 + erf(...))
//   gelu_tanh(x) = 0.5 * x * (1 + tanh(u)) = x * sigmoid(2u),
//                  u = sqrt(2 / pi) * (x + 0.044715 * x^3)  (PyTorch's approximate='tanh')
//   silu(x)      = x * sigmoid(x)
// NaN stays NaN, +inf stays +inf. kernels/cuda/elementwise.cuh computes the same expressions.
template <typename T>
T Gelu(T x) {
  if (std::isinf(x) && x < 0) return T(-0.0);
  return T(0.5) * x * std::erfc(-x * T(0.70710678118654752440));
}

template <typename T>
T GeluTanh(T x) {
  if (std::isinf(x) && x < 0) return T(-0.0);
  const T u = T(0.79788456080286535588) * (x + T(0.044715) * x * x * x);
  return x * Sigmoid(T(2) * u);
}

template <typename T>
T Silu(T x) {
  if (std::isinf(x) && x < 0) return T(-0.0);
  return x * Sigmoid(x);
}

// f16 and bf16 compute in float and round once on store.
template <typename T>
ComputeType<T> C(T x) {
  return static_cast<ComputeType<T>>(x);
}

template <typename T, typename Op>
void UnaryLoop(const KernelArgs& args, Op op) {
  const TensorLayout& in = args.meta.tensors[0];
  const TensorLayout& out = args.meta.tensors[1];
  const StridedLoop<2> loop(out, {in.strides, out.strides});
  const T* x = BufferAs<const T>(args, 0);
  T* y = BufferAs<T>(args, 1);
  ParallelFor(loop.size(), kElementwiseGrain, [&](uint64_t begin, uint64_t end) {
    loop.ForRuns(begin, end, [&](const auto& off, uint64_t n, const auto& step) {
      const T* xs = x + off[0];
      T* ys = y + off[1];
      if (step[0] == 1 && step[1] == 1) {
        for (uint64_t i = 0; i < n; ++i) ys[i] = op(xs[i]);
      } else {
        for (uint64_t i = 0; i < n; ++i) ys[i * step[1]] = op(xs[i * step[0]]);
      }
    });
  });
}

template <typename T>
absl::Status RunTyped(const KernelArgs& args) {
  switch (static_cast<UnaryOp>(args.op)) {
    case UnaryOp::kNeg:
      UnaryLoop<T>(args, [](T x) { return Neg(x); });
      return absl::OkStatus();
    case UnaryOp::kAbs:
      UnaryLoop<T>(args, [](T x) { return Abs(x); });
      return absl::OkStatus();
    case UnaryOp::kRelu:
      // x < 0 is false for NaN, so NaN passes through.
      UnaryLoop<T>(args, [](T x) { return C(x) < 0 ? T{0} : x; });
      return absl::OkStatus();
    default:
      break;
  }
  if constexpr (kIsFloat<T>) {
    switch (static_cast<UnaryOp>(args.op)) {
      case UnaryOp::kExp:
        UnaryLoop<T>(args, [](T x) { return T(std::exp(C(x))); });
        return absl::OkStatus();
      case UnaryOp::kLog:
        UnaryLoop<T>(args, [](T x) { return T(std::log(C(x))); });
        return absl::OkStatus();
      case UnaryOp::kSqrt:
        UnaryLoop<T>(args, [](T x) { return T(std::sqrt(C(x))); });
        return absl::OkStatus();
      case UnaryOp::kSigmoid:
        UnaryLoop<T>(args, [](T x) { return T(Sigmoid(C(x))); });
        return absl::OkStatus();
      case UnaryOp::kTanh:
        UnaryLoop<T>(args, [](T x) { return T(std::tanh(C(x))); });
        return absl::OkStatus();
      case UnaryOp::kGelu:
        UnaryLoop<T>(args, [](T x) { return T(Gelu(C(x))); });
        return absl::OkStatus();
      case UnaryOp::kGeluTanh:
        UnaryLoop<T>(args, [](T x) { return T(GeluTanh(C(x))); });
        return absl::OkStatus();
      case UnaryOp::kSilu:
        UnaryLoop<T>(args, [](T x) { return T(Silu(C(x))); });
        return absl::OkStatus();
      default:
        break;
    }
  }
  return absl::InternalError("unary kernel: unsupported op/dtype pair passed validation");
}

}  // namespace

absl::Status RunUnary(const KernelArgs& args) {
  return DispatchDtype<kSignedTypes>(args.call.dtype,
                                     [&](auto tag) { return RunTyped<decltype(tag)>(args); });
}

}  // namespace cubed::kernels
