#include "kernels/cpu/norm.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/dtype_dispatch.h"
#include "kernels/cpu/parallel_for.h"
#include "kernels/cpu/strided_loop.h"
#include "kernels/validate.h"

namespace cubed::kernels {
namespace {

// The type a row's statistics and outputs are computed in.
template <typename T>
using Acc = std::conditional_t<kIsHalf<T>, float, double>;

// One row: its elements x[i * sx], outputs y[i * sy], and weight w[i * sw], bias b[i * sb] where
// bound (kAffine: 0 none, 1 weight, 2 weight and bias).
template <typename T>
struct Row {
  const T* x;
  T* y;
  const T* w;
  const T* b;
  uint64_t sx, sy, sw, sb;
};

// n elements: their mean and the sum of their squared deviations from it (m2). rms_norm keeps
// mean 0 and m2 the sum of squares.
template <typename A>
struct Moments {
  A mean = 0;
  A m2 = 0;
  uint64_t n = 0;
};

// Sums of terms(i)[k] over i in [from, to), for each k < K, in four interleaved partial sums per
// k (a fixed order, so the result depends on the data only): the additions pipeline and
// vectorize, where one strict running sum would wait on each add.
template <size_t K, typename A, typename Terms>
std::array<A, K> Sums(uint64_t from, uint64_t to, Terms terms) {
  std::array<std::array<A, K>, 4> part{};
  uint64_t i = from;
  for (; i + 4 <= to; i += 4) {
    for (uint64_t u = 0; u < 4; ++u) {
      const std::array<A, K> t = terms(i + u);
      for (size_t k = 0; k < K; ++k) part[u][k] += t[k];
    }
  }
  for (; i < to; ++i) {
    const std::array<A, K> t = terms(i);
    for (size_t k = 0; k < K; ++k) part[0][k] += t[k];
  }
  std::array<A, K> total;
  for (size_t k = 0; k < K; ++k) total[k] = (part[0][k] + part[1][k]) + (part[2][k] + part[3][k]);
  return total;
}

// Note [Overflowing variance]
// When the squared deviations of finite elements overflow the compute type (bf16's 1e30 in f32),
// the sum of squares is +inf and so may be the correction's square of the deviations' sum: inf -
// inf would make the variance NaN. The variance is then taken as +inf (it exceeds the type, and
// the correction can only lower it by at most the sum itself), so rstd is 0 and the outputs are
// (x - mean) * 0 (then * weight + bias), finite where x and the mean are, as torch's Welford
// statistics give; NaN or infinite elements still give NaN. Both backends do this (norm.cuh).

// Moments of elements [from, to) of a row. layer_norm: two passes, the second corrected by the
// deviations' sum (Chan, Golub and LeVeque's corrected two-pass algorithm), so that a constant
// slice gets its value as mean and m2 = 0; m2 never goes negative (NaN stays NaN).
// kUnit: the row is contiguous (sx == 1), which lets the compiler vectorize the sums.
template <bool kUnit, bool kCenter, typename T>
Moments<Acc<T>> StridedSliceMoments(const Row<T>& r, uint64_t from, uint64_t to) {
  using A = Acc<T>;
  Moments<A> m;
  m.n = to - from;
  if (m.n == 0) return m;
  const A n = static_cast<A>(m.n);
  auto x = [&](uint64_t i) { return static_cast<A>(r.x[kUnit ? i : i * r.sx]); };
  if constexpr (!kCenter) {
    m.m2 = Sums<1, A>(from, to, [&](uint64_t i) { return std::array<A, 1>{x(i) * x(i)}; })[0];
    return m;
  }
  const A mean0 = Sums<1, A>(from, to, [&](uint64_t i) { return std::array<A, 1>{x(i)}; })[0] / n;
  const std::array<A, 2> s = Sums<2, A>(from, to, [&](uint64_t i) {
    const A d = x(i) - mean0;
    return std::array<A, 2>{d, d * d};
  });
  m.mean = mean0 + s[0] / n;
  m.m2 = s[1] - s[0] * s[0] / n;
  if (m.m2 < 0) m.m2 = 0;
  if (s[1] == std::numeric_limits<A>::infinity()) m.m2 = s[1];  // Note [Overflowing variance].
  return m;
}

template <bool kCenter, typename T>
Moments<Acc<T>> SliceMoments(const Row<T>& r, uint64_t from, uint64_t to) {
  return r.sx == 1 ? StridedSliceMoments<true, kCenter>(r, from, to)
                   : StridedSliceMoments<false, kCenter>(r, from, to);
}

// Chan et al.'s pairwise update: the moments of a's elements followed by b's.
template <typename A>
Moments<A> Merge(const Moments<A>& a, const Moments<A>& b) {
  if (a.n == 0) return b;
  if (b.n == 0) return a;
  Moments<A> m;
  m.n = a.n + b.n;
  const A wb = static_cast<A>(b.n) / static_cast<A>(m.n);
  const A d = b.mean - a.mean;
  m.mean = a.mean + d * wb;
  m.m2 = a.m2 + b.m2 + d * d * (static_cast<A>(a.n) * wb);
  return m;
}

// Writes elements [from, to) of a row: (x - mean) * rstd, times weight, plus bias. kUnit: every
// stride is 1.
template <bool kUnit, int kAffine, typename T>
void StridedNormalizeSlice(const Row<T>& r, Acc<T> mean, Acc<T> rstd, uint64_t from, uint64_t to) {
  using A = Acc<T>;
  for (uint64_t i = from; i < to; ++i) {
    A v = (static_cast<A>(r.x[kUnit ? i : i * r.sx]) - mean) * rstd;
    if constexpr (kAffine >= 1) v *= static_cast<A>(r.w[kUnit ? i : i * r.sw]);
    if constexpr (kAffine >= 2) v += static_cast<A>(r.b[kUnit ? i : i * r.sb]);
    r.y[kUnit ? i : i * r.sy] = Convert<T>(v);
  }
}

template <int kAffine, typename T>
void NormalizeSlice(const Row<T>& r, Acc<T> mean, Acc<T> rstd, uint64_t from, uint64_t to) {
  const bool unit =
      r.sx == 1 && r.sy == 1 && (kAffine < 1 || r.sw == 1) && (kAffine < 2 || r.sb == 1);
  if (unit) {
    StridedNormalizeSlice<true, kAffine>(r, mean, rstd, from, to);
  } else {
    StridedNormalizeSlice<false, kAffine>(r, mean, rstd, from, to);
  }
}

template <typename T>
Acc<T> Rstd(const Moments<Acc<T>>& m, Acc<T> eps) {
  using A = Acc<T>;
  return A(1) / std::sqrt(m.m2 / static_cast<A>(m.n) + eps);
}

template <bool kCenter, int kAffine, typename T>
void NormRow(const Row<T>& r, uint64_t len, Acc<T> eps) {
  const Moments<Acc<T>> m = SliceMoments<kCenter>(r, 0, len);
  NormalizeSlice<kAffine>(r, m.mean, Rstd<T>(m, eps), 0, len);
}

// One long row cut into fixed slices that every thread works on, as Note [Long softmax rows] in
// softmax.cc does: the slices' moments, merged in slice order (the result does not depend on the
// thread count), then the normalization. Same arithmetic as NormRow but for the merge.
constexpr uint64_t kNormSlice = uint64_t{1} << 16;

template <bool kCenter, int kAffine, typename T>
void NormLongRow(const Row<T>& r, uint64_t len, Acc<T> eps) {
  const uint64_t slices = (len + kNormSlice - 1) / kNormSlice;
  auto each_slice = [&](auto fn) {
    ParallelFor(slices, 1, [&](uint64_t begin, uint64_t end) {
      for (uint64_t k = begin; k < end; ++k) {
        fn(k, k * kNormSlice, std::min(len, (k + 1) * kNormSlice));
      }
    });
  };
  std::vector<Moments<Acc<T>>> parts(slices);
  each_slice([&](uint64_t k, uint64_t from, uint64_t to) {
    parts[k] = SliceMoments<kCenter>(r, from, to);
  });
  Moments<Acc<T>> m;
  for (const Moments<Acc<T>>& p : parts) m = Merge(m, p);
  const Acc<T> rstd = Rstd<T>(m, eps);
  each_slice([&](uint64_t, uint64_t from, uint64_t to) {
    NormalizeSlice<kAffine>(r, m.mean, rstd, from, to);
  });
}

template <bool kCenter, int kAffine, typename T>
void NormLoop(const KernelArgs& args) {
  constexpr uint32_t kOut = kAffine + 1;
  const TensorLayout& in = args.meta.tensors[0];
  const TensorLayout& out = args.meta.tensors[kOut];
  const uint32_t last = out.rank - 1;
  const uint64_t len = out.shape[last];
  // Iterate over rows: the output shape with the last dim collapsed to 1.
  TensorLayout rows = out;
  rows.shape[last] = 1;
  const StridedLoop<2> loop(rows, {in.strides, out.strides});
  Row<T> proto{BufferAs<const T>(args, 0), BufferAs<T>(args, kOut), nullptr, nullptr,
               in.strides[last],           out.strides[last],       0,       0};
  if constexpr (kAffine >= 1) {
    proto.w = BufferAs<const T>(args, 1);
    proto.sw = args.meta.tensors[1].strides[0];
  }
  if constexpr (kAffine >= 2) {
    proto.b = BufferAs<const T>(args, 2);
    proto.sb = args.meta.tensors[2].strides[0];
  }
  const Acc<T> eps = Convert<Acc<T>>(FloatScalar(args.call));  // Huge eps: +inf in f32.
  auto row_at = [&](const auto& off, uint64_t r, const auto& step) {
    Row<T> row = proto;
    row.x += off[0] + r * step[0];
    row.y += off[1] + r * step[1];
    return row;
  };
  if (len >= 2 * kNormSlice && loop.size() < Parallelism()) {
    loop.ForRuns(0, loop.size(), [&](const auto& off, uint64_t n, const auto& step) {
      for (uint64_t r = 0; r < n; ++r)
        NormLongRow<kCenter, kAffine>(row_at(off, r, step), len, eps);
    });
    return;
  }
  const uint64_t grain = std::max<uint64_t>(1, kElementwiseGrain / 4 / std::max<uint64_t>(len, 1));
  ParallelFor(len == 0 ? 0 : loop.size(), grain, [&](uint64_t begin, uint64_t end) {
    loop.ForRuns(begin, end, [&](const auto& off, uint64_t n, const auto& step) {
      for (uint64_t r = 0; r < n; ++r) NormRow<kCenter, kAffine>(row_at(off, r, step), len, eps);
    });
  });
}

template <bool kCenter, typename T>
absl::Status RunFor(const KernelArgs& args) {
  switch (args.buffers.size()) {
    case 2:
      NormLoop<kCenter, 0, T>(args);
      return absl::OkStatus();
    case 3:
      NormLoop<kCenter, 1, T>(args);
      return absl::OkStatus();
    case 4:
      if constexpr (kCenter) {
        NormLoop<kCenter, 2, T>(args);
        return absl::OkStatus();
      }
      break;
  }
  return absl::InternalError(
      absl::StrCat("norm kernel '", args.call.name, "' bound ", args.buffers.size(), " buffers"));
}

}  // namespace

absl::Status RunNorm(const KernelArgs& args) {
  return DispatchDtype<kFloatTypes>(args.call.dtype, [&](auto tag) {
    using T = decltype(tag);
    return static_cast<NormOp>(args.op) == NormOp::kLayer ? RunFor<true, T>(args)
                                                          : RunFor<false, T>(args);
  });
}

}  // namespace cubed::kernels
