#include "kernels/cpu/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/dtype_dispatch.h"
#include "kernels/cpu/parallel_for.h"
#include "kernels/cpu/scalar_ops.h"
#include "kernels/cpu/strided_loop.h"

namespace cubed::kernels {
namespace {

// A reducer folds the elements along the axis into an Acc and turns it into the output value.
// f32 sums accumulate in double, f16 and bf16 in float; integer sums wrap (unsigned arithmetic).
// Combine(a, b) joins the accumulators of two consecutive slices of the axis, a's before b's.
template <typename T>
struct SumReducer {
  using Acc =
      std::conditional_t<kIsHalf<T>, float, std::conditional_t<kIsFloat<T>, double, Wrap<T>>>;
  using Out = T;
  static Acc Init() { return Acc{0}; }
  static void Step(Acc& acc, T x, uint64_t) { acc += static_cast<Acc>(x); }
  static Acc Combine(Acc a, Acc b) { return a + b; }
  static Out Finish(Acc acc, uint64_t) { return Convert<T>(acc); }
};

template <typename T>
struct MeanReducer {
  using Acc = std::conditional_t<kIsHalf<T>, float, double>;
  using Out = T;
  static Acc Init() { return 0.0; }
  static void Step(Acc& acc, T x, uint64_t) { acc += static_cast<Acc>(x); }
  static Acc Combine(Acc a, Acc b) { return a + b; }
  static Out Finish(Acc acc, uint64_t n) {
    return n == 0 ? std::numeric_limits<T>::quiet_NaN() : Convert<T>(acc / static_cast<Acc>(n));
  }
};

template <typename T>
T Lowest() {
  if constexpr (kIsFloat<T>) return Neg(std::numeric_limits<T>::infinity());
  return std::numeric_limits<T>::lowest();
}

template <typename T>
T Highest() {
  if constexpr (kIsFloat<T>) return std::numeric_limits<T>::infinity();
  return std::numeric_limits<T>::max();
}

template <typename T>
struct MaxReducer {
  using Acc = T;
  using Out = T;
  static Acc Init() { return Lowest<T>(); }
  static void Step(Acc& acc, T x, uint64_t) { acc = Max(acc, x); }
  static Acc Combine(Acc a, Acc b) { return Max(a, b); }
  static Out Finish(Acc acc, uint64_t) { return acc; }
};

template <typename T>
struct MinReducer {
  using Acc = T;
  using Out = T;
  static Acc Init() { return Highest<T>(); }
  static void Step(Acc& acc, T x, uint64_t) { acc = Min(acc, x); }
  static Acc Combine(Acc a, Acc b) { return Min(a, b); }
  static Out Finish(Acc acc, uint64_t) { return acc; }
};

// Index of the first maximum; the first NaN wins over every number.
template <typename T>
struct ArgmaxReducer {
  struct Acc {
    T best;
    uint64_t index;
  };
  using Out = int64_t;
  static constexpr uint64_t kNone = ~uint64_t{0};  // No element seen yet.
  static Acc Init() { return {Lowest<T>(), kNone}; }
  static bool IsNan(T x) {
    if constexpr (kIsFloat<T>) return std::isnan(static_cast<ComputeType<T>>(x));
    return false;
  }
  static void Step(Acc& acc, T x, uint64_t k) {
    if (acc.index == kNone || (!IsNan(acc.best) && (IsNan(x) || x > acc.best))) acc = {x, k};
  }
  static Acc Combine(Acc a, Acc b) {
    if (b.index == kNone) return a;
    if (a.index == kNone) return b;
    return !IsNan(a.best) && (IsNan(b.best) || b.best > a.best) ? b : a;
  }
  static Out Finish(Acc acc, uint64_t) {
    return acc.index == kNone ? 0 : static_cast<int64_t>(acc.index);
  }
};

constexpr uint64_t kAccBlock = 256;

// Note [Split CPU reduction]: an axis of at least two slices of kAxisSlice elements, contiguous
// or with fewer than kAccBlock outputs (else sweeping blocks of outputs reads memory better), is
// cut into such slices, each folded by one ParallelFor item (so that one long output uses every
// thread), and each output combines its slices' accumulators in axis order. The slices depend on
// the shape alone, never on the thread count: a result is the same on every machine.
constexpr uint64_t kAxisSlice = uint64_t{1} << 16;

template <typename T, typename R>
void SplitReduceLoop(const KernelArgs& args, const StridedLoop<2>& loop) {
  using Out = typename R::Out;
  using Acc = typename R::Acc;
  const TensorLayout& in = args.meta.tensors[0];
  const uint64_t len = in.shape[args.call.axis];
  const uint64_t axis_stride = in.strides[args.call.axis];
  const uint64_t slices = (len + kAxisSlice - 1) / kAxisSlice;
  const T* x = BufferAs<const T>(args, 0);
  Out* y = BufferAs<Out>(args, 1);
  std::vector<Acc> partial(loop.size() * slices);
  ParallelFor(partial.size(), 1, [&](uint64_t begin, uint64_t end) {
    for (uint64_t item = begin; item < end; ++item) {
      const uint64_t first = item % slices * kAxisSlice;
      const uint64_t last = std::min(len, first + kAxisSlice);
      const T* xs = x + loop.At(item / slices)[0];
      Acc acc = R::Init();
      if (axis_stride == 1) {
        for (uint64_t k = first; k < last; ++k) R::Step(acc, xs[k], k);
      } else {
        for (uint64_t k = first; k < last; ++k) R::Step(acc, xs[k * axis_stride], k);
      }
      partial[item] = acc;
    }
  });
  for (uint64_t o = 0; o < loop.size(); ++o) {
    Acc acc = partial[o * slices];
    for (uint64_t j = 1; j < slices; ++j) acc = R::Combine(acc, partial[o * slices + j]);
    y[loop.At(o)[1]] = R::Finish(acc, len);
  }
}

template <typename T, typename R>
void ReduceLoop(const KernelArgs& args) {
  using Out = typename R::Out;
  using Acc = typename R::Acc;
  const TensorLayout& in = args.meta.tensors[0];
  const TensorLayout& out = args.meta.tensors[1];
  const uint32_t axis = args.call.axis;
  const uint64_t len = in.shape[axis];
  const uint64_t axis_stride = in.strides[axis];
  const StridedLoop<2> loop(out, {in.strides, out.strides});
  if (len >= 2 * kAxisSlice && (in.strides[axis] == 1 || loop.size() < kAccBlock)) {
    SplitReduceLoop<T, R>(args, loop);
    return;
  }
  const T* x = BufferAs<const T>(args, 0);
  Out* y = BufferAs<Out>(args, 1);
  const uint64_t grain = std::max<uint64_t>(1, kElementwiseGrain / std::max<uint64_t>(len, 1));
  ParallelFor(loop.size(), grain, [&](uint64_t begin, uint64_t end) {
    loop.ForRuns(begin, end, [&](const auto& off, uint64_t n, const auto& step) {
      const T* xs = x + off[0];
      Out* ys = y + off[1];
      if (axis_stride <= step[0] || n == 1) {
        // The axis is the most local direction: one output at a time, walking the axis.
        for (uint64_t i = 0; i < n; ++i) {
          Acc acc = R::Init();
          const T* xi = xs + i * step[0];
          for (uint64_t k = 0; k < len; ++k) R::Step(acc, xi[k * axis_stride], k);
          ys[i * step[1]] = R::Finish(acc, len);
        }
        return;
      }
      // Outputs are more local than the axis: sweep the axis once for a block of outputs.
      Acc acc[kAccBlock];
      for (uint64_t i0 = 0; i0 < n; i0 += kAccBlock) {
        const uint64_t m = std::min(kAccBlock, n - i0);
        for (uint64_t i = 0; i < m; ++i) acc[i] = R::Init();
        for (uint64_t k = 0; k < len; ++k) {
          const T* row = xs + k * axis_stride + i0 * step[0];
          for (uint64_t i = 0; i < m; ++i) R::Step(acc[i], row[i * step[0]], k);
        }
        for (uint64_t i = 0; i < m; ++i) ys[(i0 + i) * step[1]] = R::Finish(acc[i], len);
      }
    });
  });
}

template <typename T>
absl::Status RunTyped(const KernelArgs& args) {
  // Truth values have max (any) and min (all) only; mean is for floating types.
  constexpr bool kTruth = std::is_same_v<T, Bool8>;
  switch (static_cast<ReduceOp>(args.op)) {
    case ReduceOp::kMax:
      ReduceLoop<T, MaxReducer<T>>(args);
      return absl::OkStatus();
    case ReduceOp::kMin:
      ReduceLoop<T, MinReducer<T>>(args);
      return absl::OkStatus();
    case ReduceOp::kSum:
      if constexpr (!kTruth) {
        ReduceLoop<T, SumReducer<T>>(args);
        return absl::OkStatus();
      }
      break;
    case ReduceOp::kArgmax:
      if constexpr (!kTruth) {
        ReduceLoop<T, ArgmaxReducer<T>>(args);
        return absl::OkStatus();
      }
      break;
    case ReduceOp::kMean:
      if constexpr (!kTruth && kIsFloat<T>) {
        ReduceLoop<T, MeanReducer<T>>(args);
        return absl::OkStatus();
      }
      break;
  }
  return absl::InternalError("reduction kernel: unsupported op/dtype pair passed validation");
}

}  // namespace

absl::Status RunReduce(const KernelArgs& args) {
  return DispatchDtype<kAllTypes>(args.call.dtype,
                                  [&](auto tag) { return RunTyped<decltype(tag)>(args); });
}

}  // namespace cubed::kernels
