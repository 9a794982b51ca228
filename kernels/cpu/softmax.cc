#include "kernels/cpu/softmax.h"

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

// f32 and f64 rows store exp(x - max) and rescale it in place, summing in f64; f16 and bf16 rows
// compute in f32, sum in f32 and round once: exp(x - max) * (1 / sum) recomputed on the store.
template <typename T>
void SoftmaxRow(const T* x, uint64_t sx, T* y, uint64_t sy, uint64_t len) {
  using C = ComputeType<T>;
  C m = -std::numeric_limits<C>::infinity();
  for (uint64_t i = 0; i < len; ++i) m = Max(m, static_cast<C>(x[i * sx]));
  if constexpr (kIsHalf<T>) {
    float sum = 0;
    for (uint64_t i = 0; i < len; ++i) sum += std::exp(static_cast<float>(x[i * sx]) - m);
    const float inv = 1.0f / sum;
    for (uint64_t i = 0; i < len; ++i)
      y[i * sy] = T(std::exp(static_cast<float>(x[i * sx]) - m) * inv);
  } else {
    double sum = 0;
    for (uint64_t i = 0; i < len; ++i) {
      const T e = std::exp(x[i * sx] - m);
      y[i * sy] = e;
      sum += e;
    }
    const T inv = Convert<T>(1.0 / sum);
    for (uint64_t i = 0; i < len; ++i) y[i * sy] *= inv;
  }
}

// Note [Long softmax rows]: when there are fewer rows than threads and a row is long, one row
// is cut into fixed slices of kSoftmaxSlice elements that every thread works on, in three passes
// (slice maxima, exp and slice sums, the rescale); the partial results are combined in slice
// order, so the result does not depend on the thread count. Same arithmetic as SoftmaxRow.
constexpr uint64_t kSoftmaxSlice = uint64_t{1} << 16;

template <typename T>
void SoftmaxLongRow(const T* x, uint64_t sx, T* y, uint64_t sy, uint64_t len) {
  using C = ComputeType<T>;
  using Sum = std::conditional_t<kIsHalf<T>, float, double>;
  const uint64_t slices = (len + kSoftmaxSlice - 1) / kSoftmaxSlice;
  auto each_slice = [&](auto fn) {
    ParallelFor(slices, 1, [&](uint64_t begin, uint64_t end) {
      for (uint64_t k = begin; k < end; ++k) {
        fn(k, k * kSoftmaxSlice, std::min(len, (k + 1) * kSoftmaxSlice));
      }
    });
  };
  std::vector<C> maxima(slices, -std::numeric_limits<C>::infinity());
  each_slice([&](uint64_t k, uint64_t from, uint64_t to) {
    for (uint64_t i = from; i < to; ++i) maxima[k] = Max(maxima[k], static_cast<C>(x[i * sx]));
  });
  C m = -std::numeric_limits<C>::infinity();
  for (const C v : maxima) m = Max(m, v);
  std::vector<Sum> sums(slices, 0);
  each_slice([&](uint64_t k, uint64_t from, uint64_t to) {
    for (uint64_t i = from; i < to; ++i) {
      if constexpr (kIsHalf<T>) {
        sums[k] += std::exp(static_cast<float>(x[i * sx]) - m);
      } else {
        const T e = std::exp(x[i * sx] - m);
        y[i * sy] = e;
        sums[k] += e;
      }
    }
  });
  Sum sum = 0;
  for (const Sum v : sums) sum += v;
  each_slice([&](uint64_t, uint64_t from, uint64_t to) {
    if constexpr (kIsHalf<T>) {
      const float inv = 1.0f / sum;
      for (uint64_t i = from; i < to; ++i)
        y[i * sy] = T(std::exp(static_cast<float>(x[i * sx]) - m) * inv);
    } else {
      const T inv = Convert<T>(1.0 / sum);
      for (uint64_t i = from; i < to; ++i) y[i * sy] *= inv;
    }
  });
}

template <typename T>
void SoftmaxLoop(const KernelArgs& args) {
  const TensorLayout& in = args.meta.tensors[0];
  const TensorLayout& out = args.meta.tensors[1];
  const uint32_t last = out.rank - 1;
  const uint64_t len = out.shape[last];
  // Iterate over rows: the output shape with the last dim collapsed to 1.
  TensorLayout rows = out;
  rows.shape[last] = 1;
  const StridedLoop<2> loop(rows, {in.strides, out.strides});
  const T* x = BufferAs<const T>(args, 0);
  T* y = BufferAs<T>(args, 1);
  const uint64_t sx = in.strides[last], sy = out.strides[last];
  if (len >= 2 * kSoftmaxSlice && loop.size() < Parallelism()) {  // Note [Long softmax rows].
    loop.ForRuns(0, loop.size(), [&](const auto& off, uint64_t n, const auto& step) {
      for (uint64_t r = 0; r < n; ++r) {
        SoftmaxLongRow(x + off[0] + r * step[0], sx, y + off[1] + r * step[1], sy, len);
      }
    });
    return;
  }
  const uint64_t grain = std::max<uint64_t>(1, kElementwiseGrain / 4 / std::max<uint64_t>(len, 1));
  ParallelFor(len == 0 ? 0 : loop.size(), grain, [&](uint64_t begin, uint64_t end) {
    loop.ForRuns(begin, end, [&](const auto& off, uint64_t n, const auto& step) {
      for (uint64_t r = 0; r < n; ++r) {
        SoftmaxRow(x + off[0] + r * step[0], sx, y + off[1] + r * step[1], sy, len);
      }
    });
  });
}

}  // namespace

absl::Status RunSoftmax(const KernelArgs& args) {
  return DispatchDtype<kFloatTypes>(args.call.dtype, [&](auto tag) {
    SoftmaxLoop<decltype(tag)>(args);
    return absl::OkStatus();
  });
}

}  // namespace cubed::kernels
