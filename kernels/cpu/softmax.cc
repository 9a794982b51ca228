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
#include "kernels/validate.h"

namespace cubed::kernels {
namespace {

// Which elements of a row take part and how they are scaled: softmax uses all `len` of them as
// they are; causal_softmax the first `visible` (Note [Causal rows]), each times `scale`, and
// writes 0 to the rest.
template <typename C>
struct RowRule {
  C scale;
  uint64_t visible;
};

// Element i of a row in the compute type, scaled when the kernel is causal_softmax.
template <bool kScaled, typename T, typename C>
C Scaled(T x, C scale) {
  if constexpr (kScaled) {
    return static_cast<C>(x) * scale;
  } else {
    return static_cast<C>(x);
  }
}

// f32 and f64 rows store exp(x - max) and rescale it in place, summing in f64; f16 and bf16 rows
// compute in f32, sum in f32 and round once: exp(x - max) * (1 / sum) recomputed on the store.
template <bool kScaled, typename T>
void SoftmaxRow(const T* x, uint64_t sx, T* y, uint64_t sy, uint64_t len,
                const RowRule<ComputeType<T>>& rule) {
  using C = ComputeType<T>;
  const uint64_t n = std::min(len, rule.visible);
  C m = -std::numeric_limits<C>::infinity();
  for (uint64_t i = 0; i < n; ++i) m = Max(m, Scaled<kScaled>(x[i * sx], rule.scale));
  if constexpr (kIsHalf<T>) {
    float sum = 0;
    for (uint64_t i = 0; i < n; ++i) sum += std::exp(Scaled<kScaled>(x[i * sx], rule.scale) - m);
    const float inv = 1.0f / sum;
    for (uint64_t i = 0; i < n; ++i)
      y[i * sy] = T(std::exp(Scaled<kScaled>(x[i * sx], rule.scale) - m) * inv);
  } else {
    double sum = 0;
    for (uint64_t i = 0; i < n; ++i) {
      const T e = std::exp(Scaled<kScaled>(x[i * sx], rule.scale) - m);
      y[i * sy] = e;
      sum += e;
    }
    const T inv = Convert<T>(1.0 / sum);
    for (uint64_t i = 0; i < n; ++i) y[i * sy] *= inv;
  }
  for (uint64_t i = n; i < len; ++i) y[i * sy] = T(0);
}

// Note [Long softmax rows]: when there are fewer rows than threads and a row is long, one row
// is cut into fixed slices of kSoftmaxSlice elements that every thread works on, in three passes
// (slice maxima, exp and slice sums, the rescale); the partial results are combined in slice
// order, so the result does not depend on the thread count. Same arithmetic as SoftmaxRow.
constexpr uint64_t kSoftmaxSlice = uint64_t{1} << 16;

template <bool kScaled, typename T>
void SoftmaxLongRow(const T* x, uint64_t sx, T* y, uint64_t sy, uint64_t len,
                    const RowRule<ComputeType<T>>& rule) {
  using C = ComputeType<T>;
  using Sum = std::conditional_t<kIsHalf<T>, float, double>;
  const uint64_t n = std::min(len, rule.visible);
  const uint64_t slices = (len + kSoftmaxSlice - 1) / kSoftmaxSlice;
  auto each_slice = [&](auto fn) {
    ParallelFor(slices, 1, [&](uint64_t begin, uint64_t end) {
      for (uint64_t k = begin; k < end; ++k) {
        fn(k, k * kSoftmaxSlice, std::min(len, (k + 1) * kSoftmaxSlice));
      }
    });
  };
  auto value = [&](uint64_t i) { return Scaled<kScaled>(x[i * sx], rule.scale); };
  std::vector<C> maxima(slices, -std::numeric_limits<C>::infinity());
  each_slice([&](uint64_t k, uint64_t from, uint64_t to) {
    for (uint64_t i = from; i < std::min(to, n); ++i) maxima[k] = Max(maxima[k], value(i));
  });
  C m = -std::numeric_limits<C>::infinity();
  for (const C v : maxima) m = Max(m, v);
  std::vector<Sum> sums(slices, 0);
  each_slice([&](uint64_t k, uint64_t from, uint64_t to) {
    for (uint64_t i = from; i < std::min(to, n); ++i) {
      if constexpr (kIsHalf<T>) {
        sums[k] += std::exp(value(i) - m);
      } else {
        const T e = std::exp(value(i) - m);
        y[i * sy] = e;
        sums[k] += e;
      }
    }
  });
  Sum sum = 0;
  for (const Sum v : sums) sum += v;
  each_slice([&](uint64_t, uint64_t from, uint64_t to) {
    const uint64_t visible_to = std::max(from, std::min(to, n));
    if constexpr (kIsHalf<T>) {
      const float inv = 1.0f / sum;
      for (uint64_t i = from; i < visible_to; ++i) y[i * sy] = T(std::exp(value(i) - m) * inv);
    } else {
      const T inv = Convert<T>(1.0 / sum);
      for (uint64_t i = from; i < visible_to; ++i) y[i * sy] *= inv;
    }
    for (uint64_t i = visible_to; i < to; ++i) y[i * sy] = T(0);
  });
}

// Note [Causal rows]
// causal_softmax treats its input's last two dims as [L queries, S keys]: query i sees keys
// 0..i, the lower triangle aligned at the top left as torch's is_causal mask, so row r (row-major
// over the dims before the last) is query r % L and has min(S, r % L + 1) visible elements.
// Every row sees key 0, so no row is all masked; masked outputs are exactly 0.
template <bool kCausal, typename T>
void SoftmaxLoop(const KernelArgs& args) {
  using C = ComputeType<T>;
  const TensorLayout& in = args.meta.tensors[0];
  const TensorLayout& out = args.meta.tensors[1];
  const uint32_t last = out.rank - 1;
  const uint64_t len = out.shape[last];
  const uint64_t queries = kCausal ? out.shape[last - 1] : 1;
  const C scale = kCausal ? Convert<C>(FloatScalar(args.call)) : C(1);
  auto rule_of = [&](uint64_t row) { return RowRule<C>{scale, kCausal ? row % queries + 1 : len}; };
  // Iterate over rows: the output shape with the last dim collapsed to 1.
  TensorLayout rows = out;
  rows.shape[last] = 1;
  const StridedLoop<2> loop(rows, {in.strides, out.strides});
  const T* x = BufferAs<const T>(args, 0);
  T* y = BufferAs<T>(args, 1);
  const uint64_t sx = in.strides[last], sy = out.strides[last];
  if (len >= 2 * kSoftmaxSlice && loop.size() < Parallelism()) {  // Note [Long softmax rows].
    uint64_t row = 0;
    loop.ForRuns(0, loop.size(), [&](const auto& off, uint64_t n, const auto& step) {
      for (uint64_t r = 0; r < n; ++r, ++row) {
        SoftmaxLongRow<kCausal>(x + off[0] + r * step[0], sx, y + off[1] + r * step[1], sy, len,
                                rule_of(row));
      }
    });
    return;
  }
  const uint64_t grain = std::max<uint64_t>(1, kElementwiseGrain / 4 / std::max<uint64_t>(len, 1));
  ParallelFor(len == 0 ? 0 : loop.size(), grain, [&](uint64_t begin, uint64_t end) {
    uint64_t row = begin;
    loop.ForRuns(begin, end, [&](const auto& off, uint64_t n, const auto& step) {
      for (uint64_t r = 0; r < n; ++r, ++row) {
        SoftmaxRow<kCausal>(x + off[0] + r * step[0], sx, y + off[1] + r * step[1], sy, len,
                            rule_of(row));
      }
    });
  });
}

}  // namespace

absl::Status RunSoftmax(const KernelArgs& args) {
  return DispatchDtype<kFloatTypes>(args.call.dtype, [&](auto tag) {
    SoftmaxLoop<false, decltype(tag)>(args);
    return absl::OkStatus();
  });
}

absl::Status RunCausalSoftmax(const KernelArgs& args) {
  return DispatchDtype<kFloatTypes>(args.call.dtype, [&](auto tag) {
    SoftmaxLoop<true, decltype(tag)>(args);
    return absl::OkStatus();
  });
}

}  // namespace cubed::kernels
