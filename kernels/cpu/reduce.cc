#include "kernels/cpu/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/dtype_dispatch.h"
#include "kernels/cpu/parallel_for.h"
#include "kernels/cpu/scalar_ops.h"
#include "kernels/cpu/strided_loop.h"

namespace cubed::kernels {
namespace {

// A reducer folds the elements along the axis into an Acc and turns it into the output value.
// f32 sums accumulate in double; integer sums wrap (unsigned arithmetic).
template <typename T>
struct SumReducer {
  using Acc = std::conditional_t<std::is_floating_point_v<T>, double, Wrap<T>>;
  using Out = T;
  static Acc Init() { return Acc{0}; }
  static void Step(Acc& acc, T x, uint64_t) { acc += static_cast<Acc>(x); }
  static Out Finish(Acc acc, uint64_t) { return Convert<T>(acc); }
};

template <typename T>
struct MeanReducer {
  using Acc = double;
  using Out = T;
  static Acc Init() { return 0.0; }
  static void Step(Acc& acc, T x, uint64_t) { acc += static_cast<double>(x); }
  static Out Finish(Acc acc, uint64_t n) {
    return n == 0 ? std::numeric_limits<T>::quiet_NaN() : Convert<T>(acc / static_cast<double>(n));
  }
};

template <typename T>
constexpr T Lowest() {
  if constexpr (std::is_floating_point_v<T>) return -std::numeric_limits<T>::infinity();
  return std::numeric_limits<T>::lowest();
}

template <typename T>
constexpr T Highest() {
  if constexpr (std::is_floating_point_v<T>) return std::numeric_limits<T>::infinity();
  return std::numeric_limits<T>::max();
}

template <typename T>
struct MaxReducer {
  using Acc = T;
  using Out = T;
  static Acc Init() { return Lowest<T>(); }
  static void Step(Acc& acc, T x, uint64_t) { acc = Max(acc, x); }
  static Out Finish(Acc acc, uint64_t) { return acc; }
};

template <typename T>
struct MinReducer {
  using Acc = T;
  using Out = T;
  static Acc Init() { return Highest<T>(); }
  static void Step(Acc& acc, T x, uint64_t) { acc = Min(acc, x); }
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
  static Acc Init() { return {Lowest<T>(), 0}; }
  static bool IsNan(T x) {
    if constexpr (std::is_floating_point_v<T>) return std::isnan(x);
    return false;
  }
  static void Step(Acc& acc, T x, uint64_t k) {
    if (k == 0 || (!IsNan(acc.best) && (IsNan(x) || x > acc.best))) acc = {x, k};
  }
  static Out Finish(Acc acc, uint64_t) { return static_cast<int64_t>(acc.index); }
};

constexpr uint64_t kAccBlock = 256;

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
  switch (static_cast<ReduceOp>(args.op)) {
    case ReduceOp::kSum:
      ReduceLoop<T, SumReducer<T>>(args);
      return absl::OkStatus();
    case ReduceOp::kMax:
      ReduceLoop<T, MaxReducer<T>>(args);
      return absl::OkStatus();
    case ReduceOp::kMin:
      ReduceLoop<T, MinReducer<T>>(args);
      return absl::OkStatus();
    case ReduceOp::kArgmax:
      ReduceLoop<T, ArgmaxReducer<T>>(args);
      return absl::OkStatus();
    case ReduceOp::kMean:
      if constexpr (std::is_floating_point_v<T>) {
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
