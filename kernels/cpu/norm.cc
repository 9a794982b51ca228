#include "kernels/cpu/norm.h"

#include <algorithm>
#include <cmath>
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

// Moments of elements [from, to) of a row. layer_norm: two passes, the second corrected by the
// deviations' sum (Chan, Golub and LeVeque's corrected two-pass algorithm), so that a constant
// slice gets its value as mean and m2 = 0; m2 never goes negative (NaN stays NaN).
template <bool kCenter, typename T>
Moments<Acc<T>> SliceMoments(const Row<T>& r, uint64_t from, uint64_t to) {
  using A = Acc<T>;
  Moments<A> m;
  m.n = to - from;
  if (m.n == 0) return m;
  const A n = static_cast<A>(m.n);
  if constexpr (!kCenter) {
    A ss = 0;
    for (uint64_t i = from; i < to; ++i) {
      const A v = static_cast<A>(r.x[i * r.sx]);
      ss += v * v;
    }
    m.m2 = ss;
    return m;
  }
  A sum = 0;
  for (uint64_t i = from; i < to; ++i) sum += static_cast<A>(r.x[i * r.sx]);
  const A mean0 = sum / n;
  A s1 = 0, s2 = 0;
  for (uint64_t i = from; i < to; ++i) {
    const A d = static_cast<A>(r.x[i * r.sx]) - mean0;
    s1 += d;
    s2 += d * d;
  }
  m.mean = mean0 + s1 / n;
  m.m2 = s2 - s1 * s1 / n;
  if (m.m2 < 0) m.m2 = 0;
  return m;
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

// Writes elements [from, to) of a row: (x - mean) * rstd, times weight, plus bias.
template <int kAffine, typename T>
void NormalizeSlice(const Row<T>& r, Acc<T> mean, Acc<T> rstd, uint64_t from, uint64_t to) {
  using A = Acc<T>;
  for (uint64_t i = from; i < to; ++i) {
    A v = (static_cast<A>(r.x[i * r.sx]) - mean) * rstd;
    if constexpr (kAffine >= 1) v *= static_cast<A>(r.w[i * r.sw]);
    if constexpr (kAffine >= 2) v += static_cast<A>(r.b[i * r.sb]);
    r.y[i * r.sy] = Convert<T>(v);
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
  const Acc<T> eps = static_cast<Acc<T>>(NormEps(args.call));
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
