#include "kernels/cpu/binary.h"

#include <cmath>
#include <type_traits>

#include "kernels/cpu/dtype_dispatch.h"
#include "kernels/cpu/parallel_for.h"
#include "kernels/cpu/scalar_ops.h"
#include "kernels/cpu/strided_loop.h"

namespace cubed::kernels {
namespace {

// out = op(lhs, rhs) over out's elements: inputs of T, the output of Out.
template <typename T, typename Out = T, typename Op>
void BinaryLoop(const KernelArgs& args, Op op) {
  const TensorLayout& out = args.meta.tensors[2];
  const StridedLoop<3> loop(out, {BroadcastStrides(args.meta.tensors[0]),
                                  BroadcastStrides(args.meta.tensors[1]), out.strides});
  const T* a = BufferAs<const T>(args, 0);
  const T* b = BufferAs<const T>(args, 1);
  Out* c = BufferAs<Out>(args, 2);
  ParallelFor(loop.size(), kElementwiseGrain, [&](uint64_t begin, uint64_t end) {
    loop.ForRuns(begin, end, [&](const auto& off, uint64_t n, const auto& step) {
      const T* as = a + off[0];
      const T* bs = b + off[1];
      Out* cs = c + off[2];
      if (step[0] == 1 && step[1] == 1 && step[2] == 1) {
        for (uint64_t i = 0; i < n; ++i) cs[i] = op(as[i], bs[i]);
      } else if (step[0] == 1 && step[1] == 0 && step[2] == 1) {
        const T bv = *bs;
        for (uint64_t i = 0; i < n; ++i) cs[i] = op(as[i], bv);
      } else if (step[0] == 0 && step[1] == 1 && step[2] == 1) {
        const T av = *as;
        for (uint64_t i = 0; i < n; ++i) cs[i] = op(av, bs[i]);
      } else {
        for (uint64_t i = 0; i < n; ++i) cs[i * step[2]] = op(as[i * step[0]], bs[i * step[1]]);
      }
    });
  });
}

template <typename T>
absl::Status RunTyped(const KernelArgs& args) {
  if constexpr (std::is_same_v<T, Bool8>) {
    // Truth values have max (or) and min (and) only.
    if (static_cast<BinaryOp>(args.op) == BinaryOp::kMax) {
      BinaryLoop<T>(args, [](T a, T b) { return Max(a, b); });
      return absl::OkStatus();
    }
    if (static_cast<BinaryOp>(args.op) == BinaryOp::kMin) {
      BinaryLoop<T>(args, [](T a, T b) { return Min(a, b); });
      return absl::OkStatus();
    }
    return absl::InternalError("binary kernel: unsupported op/dtype pair passed validation");
  } else {
    switch (static_cast<BinaryOp>(args.op)) {
      case BinaryOp::kAdd:
        BinaryLoop<T>(args, [](T a, T b) { return Add(a, b); });
        return absl::OkStatus();
      case BinaryOp::kSub:
        BinaryLoop<T>(args, [](T a, T b) { return Sub(a, b); });
        return absl::OkStatus();
      case BinaryOp::kMul:
        BinaryLoop<T>(args, [](T a, T b) { return Mul(a, b); });
        return absl::OkStatus();
      case BinaryOp::kDiv:
        BinaryLoop<T>(args, [](T a, T b) { return Div(a, b); });
        return absl::OkStatus();
      case BinaryOp::kMax:
        BinaryLoop<T>(args, [](T a, T b) { return Max(a, b); });
        return absl::OkStatus();
      case BinaryOp::kMin:
        BinaryLoop<T>(args, [](T a, T b) { return Min(a, b); });
        return absl::OkStatus();
      case BinaryOp::kPow:
        if constexpr (kIsFloat<T>) {
          BinaryLoop<T>(args, [](T a, T b) {
            return T(std::pow(static_cast<ComputeType<T>>(a), static_cast<ComputeType<T>>(b)));
          });
          return absl::OkStatus();
        }
        break;
    }
    return absl::InternalError("binary kernel: unsupported op/dtype pair passed validation");
  }
}

// The value a comparison sees: halves widen to float (exactly), bool reads as a truth value.
template <typename T>
auto Comparable(T x) {
  if constexpr (std::is_same_v<T, Bool8>) {
    return static_cast<bool>(x);
  } else {
    return static_cast<ComputeType<T>>(x);
  }
}

template <typename T>
absl::Status RunCompareTyped(const KernelArgs& args) {
  // Every operator of C++ is IEEE 754's comparison: false with a NaN operand, but for !=.
  switch (static_cast<CompareOp>(args.op)) {
    case CompareOp::kEq:
      BinaryLoop<T, Bool8>(args, [](T a, T b) { return Bool8(Comparable(a) == Comparable(b)); });
      return absl::OkStatus();
    case CompareOp::kNe:
      BinaryLoop<T, Bool8>(args, [](T a, T b) { return Bool8(Comparable(a) != Comparable(b)); });
      return absl::OkStatus();
    case CompareOp::kLt:
      BinaryLoop<T, Bool8>(args, [](T a, T b) { return Bool8(Comparable(a) < Comparable(b)); });
      return absl::OkStatus();
    case CompareOp::kLe:
      BinaryLoop<T, Bool8>(args, [](T a, T b) { return Bool8(Comparable(a) <= Comparable(b)); });
      return absl::OkStatus();
    case CompareOp::kGt:
      BinaryLoop<T, Bool8>(args, [](T a, T b) { return Bool8(Comparable(a) > Comparable(b)); });
      return absl::OkStatus();
    case CompareOp::kGe:
      BinaryLoop<T, Bool8>(args, [](T a, T b) { return Bool8(Comparable(a) >= Comparable(b)); });
      return absl::OkStatus();
  }
  return absl::InternalError("compare kernel: unknown op");
}

}  // namespace

absl::Status RunBinary(const KernelArgs& args) {
  return DispatchDtype<kAllTypes>(args.call.dtype,
                                  [&](auto tag) { return RunTyped<decltype(tag)>(args); });
}

absl::Status RunCompare(const KernelArgs& args) {
  return DispatchDtype<kAllTypes>(args.call.dtype,
                                  [&](auto tag) { return RunCompareTyped<decltype(tag)>(args); });
}

}  // namespace cubed::kernels
