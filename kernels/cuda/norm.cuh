// layer_norm and rms_norm along the last axis. Buffer 0 is the input; then, by kAffine, the weight
// (1) and the bias (2), 1-D of the row's length; the last buffer is the output (the input's
// shape; may be the input's memory with its layout). A warp or a block (CUBED_CUDA_GROUP_*)
// normalizes one row at a time, sized as softmax.cuh's groups: a row that fits in its group's
// registers (CUBED_CUDA_SOFTMAX_CACHE_BYTES a thread) is read once, with 16-byte loads and stores
// where it is contiguous and aligned, and written once; a longer row is read twice (statistics,
// then outputs). One group all-reduce per row: layer_norm's moments (Note [Norm moments]),
// rms_norm's sum of squares. f32, f16 and bf16 compute in f32, f64 in f64 (the CPU kernel
// accumulates f32 in f64, so the backends differ in the last bits); each output rounds once.
#include "common.cuh"

namespace cubed {

struct LayerNormOp {
  static constexpr bool kCenter = true;
};
struct RmsNormOp {
  static constexpr bool kCenter = false;
};

// Note [Norm moments]
// A row held in registers (NormCachedRow) takes the corrected two-pass algorithm of Chan, Golub
// and LeVeque over the whole row: one group all-reduce of the sum gives mean0 = sum / n, a second
// of the deviations d = x - mean0 and of d^2 gives mean = mean0 + sum(d) / n and m2 = sum(d^2) -
// sum(d)^2 / n (never below 0), so a constant row has mean0's rounding corrected (its outputs
// are the bias up to that rounding times rstd). Two all-reduces of plain sums cost less than one
// of merged moments, whose every step divides.
// A streamed row (too long for registers) is summarized as (mean, m2, n), m2 the sum of
// squared deviations from the mean: a thread computes four elements' moments in two corrected
// passes over registers, so equal elements give m2 = 0 exactly, and merges them with Chan et
// al.'s pairwise update: mean = lo.mean + d * (hi.n / n), m2 = lo.m2 + hi.m2 + d^2 * (lo.n *
// hi.n / n), d = hi.mean - lo.mean, "lo" the operand of the smaller mean. The order makes
// Merge(a, b) and Merge(b, a) bitwise equal, as WarpAllReduce's XOR butterfly (each pair merged
// in both orders on two lanes) needs; equal means merge exactly (d = 0), so a constant row has
// variance 0 and gives the bias. A NaN or infinite mean makes the merged moments NaN or
// infinite in both orders.
template <class C>
struct Moments {
  C mean, m2;
  u32 n;
};

template <class C>
__device__ __forceinline__ Moments<C> Merge(const Moments<C>& a, const Moments<C>& b) {
  if (a.n == 0) return b;
  if (b.n == 0) return a;
  const bool swap = b.mean < a.mean;
  const Moments<C>& lo = swap ? b : a;
  const Moments<C>& hi = swap ? a : b;
  Moments<C> r;
  r.n = a.n + b.n;
  const C inv = C(1) / static_cast<C>(r.n);
  const C d = hi.mean - lo.mean;
  r.mean = lo.mean + d * (static_cast<C>(hi.n) * inv);
  r.m2 = (a.m2 + b.m2) + d * d * (static_cast<C>(a.n) * static_cast<C>(b.n) * inv);
  return r;
}

template <class C>
struct MomentsCombine {
  static __device__ Moments<C> Combine(const Moments<C>& a, const Moments<C>& b) {
    return Merge(a, b);
  }
  static __device__ Moments<C> Shfl(const Moments<C>& v, int m) {
    Moments<C> r;
    r.mean = ShflXor(v.mean, m);
    r.m2 = ShflXor(v.m2, m);
    r.n = ShflXor(v.n, m);
    return r;
  }
};

// Moments of `n` elements, given their sum and a second pass `dev(mean0, s1, s2)` that adds
// their deviations from mean0 and the squares of those to s1 and s2.
template <class C, class Dev>
__device__ __forceinline__ Moments<C> CorrectedMoments(C sum, u32 n, Dev dev) {
  Moments<C> m;
  m.n = n;
  m.mean = C(0);
  m.m2 = C(0);
  if (n == 0) return m;
  const C cn = static_cast<C>(n);
  const C mean0 = sum / cn;
  C s1 = C(0), s2 = C(0);
  dev(mean0, s1, s2);
  m.mean = mean0 + s1 / cn;
  m.m2 = s2 - s1 * s1 / cn;
  if (m.m2 < C(0)) m.m2 = C(0);            // Rounding only; NaN stays NaN.
  if (s2 == Num<C>::Highest()) m.m2 = s2;  // Note [Overflowing variance] in kernels/cpu/norm.cc.
  return m;
}

// One row's buffers and strides (elements), the compute type C, and eps.
template <class T, class C>
struct NormRow {
  Buf<const T> x, w, b;
  Buf<T> y;
  u64 len, sx, sy, sw, sb;
  C eps;
};

// The row's mean (0 for rms_norm) and 1 / sqrt(var + eps), var = m2 / len (rms_norm: the sum
// of squares / len).
template <class C>
struct NormScale {
  C mean, rstd;
};
template <class Op, class C>
__device__ __forceinline__ NormScale<C> Scale(const Moments<C>& m, C ss, u64 len, C eps) {
  NormScale<C> s;
  const C n = static_cast<C>(len);
  s.mean = Op::kCenter ? m.mean : C(0);
  s.rstd = C(1) / Sqrt((Op::kCenter ? m.m2 : ss) / n + eps);
  return s;
}

// One output: (x - mean) * rstd, times weight, plus bias (as kAffine binds them).
template <class Op, int kAffine, class T, class C>
__device__ __forceinline__ T NormOut(const NormScale<C>& s, C x, T w, T b) {
  C v;
  if constexpr (Op::kCenter) {
    v = (x - s.mean) * s.rstd;
  } else {
    v = x * s.rstd;
  }
  if constexpr (kAffine >= 1) v *= static_cast<C>(w);
  if constexpr (kAffine >= 2) v += static_cast<C>(b);
  return static_cast<T>(v);
}

// kV elements of a 1-D parameter of `len` elements from element `first` (0 past the end): one
// 16-byte load where it is contiguous and aligned.
template <class T, u32 kV>
__device__ __forceinline__ Pack<T, kV> LoadParam(const Buf<const T>& p, u64 stride, u64 first,
                                                 u64 len) {
  Pack<T, kV> v;
  if (stride == 1 && len <= p.n && Aligned(p.p, 16) && first + kV <= len) {
    return *reinterpret_cast<const Pack<T, kV>*>(p.p + first);
  }
#pragma unroll
  for (u32 k = 0; k < kV; ++k) v.v[k] = first + k < len ? Load(p, (first + k) * stride) : T(0);
  return v;
}

// Deviations from a mean and their squares, summed (the second pass of Note [Norm moments]).
template <class C>
struct Deviations {
  C sum, squares;
};
template <class C>
__device__ __forceinline__ Deviations<C> operator+(const Deviations<C>& x, const Deviations<C>& y) {
  return {x.sum + y.sum, x.squares + y.squares};
}
template <class C>
__device__ __forceinline__ Deviations<C> ShflXor(const Deviations<C>& v, int m) {
  return {ShflXor(v.sum, m), ShflXor(v.squares, m)};
}

// Whether NormDenseRow may take the row at x[bx..], y[by..]: x, y (and the weight and bias
// kAffine binds) contiguous, 16-byte aligned where the row starts, the row a whole number of
// packs, every access in bounds.
template <int kAffine, class T, class C>
__device__ __forceinline__ bool DenseRow(const NormRow<T, C>& p, u64 bx, u64 by) {
  constexpr u32 kV = 16 / sizeof(T);
  const u64 len = p.len;
  bool ok = len % kV == 0 && p.sx == 1 && p.sy == 1 && bx + len <= p.x.n && by + len <= p.y.n &&
            Aligned(p.x.p + bx, 16) && Aligned(p.y.p + by, 16);
  if constexpr (kAffine >= 1) ok = ok && p.sw == 1 && len <= p.w.n && Aligned(p.w.p, 16);
  if constexpr (kAffine >= 2) ok = ok && p.sb == 1 && len <= p.b.n && Aligned(p.b.p, 16);
  return ok;
}

// NormCachedRow for a row DenseRow admits: whole 16-byte packs only, no per-element bounds
// checks or strides, so the kernel's 64 registers (__launch_bounds__(1024)) hold it without
// spilling (ptxas: the general path spilled up to 172 bytes a thread in bf16; GPU run 51:
// layer_norm bf16 0.55x -> 1.10x torch).
template <class Op, int kAffine, class T, class C>
__device__ __forceinline__ void NormDenseRow(const NormRow<T, C>& p, u64 bx, u64 by, const Group& g,
                                             u32 variant) {
  constexpr u32 kV = 16 / sizeof(T);
  constexpr u32 kPacks = CUBED_CUDA_SOFTMAX_CACHE_BYTES / 16;
  const u32 packs = static_cast<u32>(p.len / kV);  // <= the group's size * kPacks.
  const Pack<T, kV>* x = reinterpret_cast<const Pack<T, kV>*>(p.x.p + bx);
  Pack<T, kV> v[kPacks];
  C sum = C(0);  // layer_norm: of the elements; rms_norm: of their squares.
#pragma unroll
  for (u32 j = 0; j < kPacks; ++j) {
    const u32 i = j * g.size + g.lane;
    if (i < packs) {
      v[j] = x[i];
    } else {
#pragma unroll
      for (u32 k = 0; k < kV; ++k) v[j].v[k] = T(0);
    }
#pragma unroll
    for (u32 k = 0; k < kV; ++k) {
      const C e = static_cast<C>(v[j].v[k]);
      sum += Op::kCenter ? e : e * e;
    }
  }
  Moments<C> m = {C(0), C(0), 0u};
  sum = GroupAllReduce<SumCombine<C>>(sum, variant);
  if constexpr (Op::kCenter) {  // Note [Norm moments]: the row's corrected two passes.
    const C n = static_cast<C>(p.len);
    const C mean0 = sum / n;
    Deviations<C> dev = {C(0), C(0)};
#pragma unroll
    for (u32 j = 0; j < kPacks; ++j) {
      if (j * g.size + g.lane < packs) {
#pragma unroll
        for (u32 k = 0; k < kV; ++k) {
          const C d = static_cast<C>(v[j].v[k]) - mean0;
          dev.sum += d;
          dev.squares += d * d;
        }
      }
    }
    dev = GroupAllReduce<SumCombine<Deviations<C>>>(dev, variant);
    m.n = static_cast<u32>(p.len);
    m.mean = mean0 + dev.sum / n;
    m.m2 = dev.squares - dev.sum * dev.sum / n;
    if (m.m2 < C(0)) m.m2 = C(0);                              // Rounding only; NaN stays NaN.
    if (dev.squares == Num<C>::Highest()) m.m2 = dev.squares;  // Note [Overflowing variance].
  }
  const NormScale<C> s = Scale<Op>(m, sum, p.len, p.eps);
  Pack<T, kV>* y = reinterpret_cast<Pack<T, kV>*>(p.y.p + by);
  const Pack<T, kV>* w = reinterpret_cast<const Pack<T, kV>*>(p.w.p);
  const Pack<T, kV>* b = reinterpret_cast<const Pack<T, kV>*>(p.b.p);
#pragma unroll
  for (u32 j = 0; j < kPacks; ++j) {
    const u32 i = j * g.size + g.lane;
    if (i >= packs) continue;
    Pack<T, kV> wj, bj;
    if constexpr (kAffine >= 1) wj = w[i];
    if constexpr (kAffine >= 2) bj = b[i];
#pragma unroll
    for (u32 k = 0; k < kV; ++k) {
      v[j].v[k] = NormOut<Op, kAffine>(s, static_cast<C>(v[j].v[k]), kAffine >= 1 ? wj.v[k] : T(0),
                                       kAffine >= 2 ? bj.v[k] : T(0));
    }
    y[i] = v[j];
  }
}

// One row held in registers: thread `lane` of a group of `size` holds the 16-byte packs
// lane, lane + size, ... (kPacks of them) of the row, element k of pack j at j * kV + k.
template <class Op, int kAffine, class T, class C>
__device__ __forceinline__ void NormCachedRow(const NormRow<T, C>& p, u64 bx, u64 by,
                                              const Group& g, u32 variant) {
  constexpr u32 kV = 16 / sizeof(T);
  constexpr u32 kPacks = CUBED_CUDA_SOFTMAX_CACHE_BYTES / 16;
  const u64 len = p.len;
  const bool vx = p.sx == 1 && bx + len <= p.x.n && Aligned(p.x.p + bx, 16);
  const bool vy = p.sy == 1 && by + len <= p.y.n && Aligned(p.y.p + by, 16);
  Pack<T, kV> v[kPacks];
  C sum = C(0);  // layer_norm: of the elements; rms_norm: of their squares.
#pragma unroll
  for (u32 j = 0; j < kPacks; ++j) {
    const u64 first = (j * static_cast<u64>(g.size) + g.lane) * kV;
    if (vx && first + kV <= len) {
      v[j] = *reinterpret_cast<const Pack<T, kV>*>(p.x.p + bx + first);
    } else {
#pragma unroll
      for (u32 k = 0; k < kV; ++k) {
        v[j].v[k] = first + k < len ? Load(p.x, bx + (first + k) * p.sx) : T(0);
      }
    }
#pragma unroll
    for (u32 k = 0; k < kV; ++k) {
      const C x = static_cast<C>(v[j].v[k]);  // 0 past the row's end.
      sum += Op::kCenter ? x : x * x;
    }
  }
  Moments<C> m = {C(0), C(0), 0u};
  sum = GroupAllReduce<SumCombine<C>>(sum, variant);
  if constexpr (Op::kCenter) {  // Note [Norm moments]: the row's corrected two passes.
    const C n = static_cast<C>(len);
    const C mean0 = sum / n;
    Deviations<C> dev = {C(0), C(0)};
#pragma unroll
    for (u32 j = 0; j < kPacks; ++j) {
      const u64 first = (j * static_cast<u64>(g.size) + g.lane) * kV;
      const bool whole = first + kV <= len;
#pragma unroll
      for (u32 k = 0; k < kV; ++k) {
        if (whole || first + k < len) {
          const C d = static_cast<C>(v[j].v[k]) - mean0;
          dev.sum += d;
          dev.squares += d * d;
        }
      }
    }
    dev = GroupAllReduce<SumCombine<Deviations<C>>>(dev, variant);
    m.n = static_cast<u32>(len);
    m.mean = mean0 + dev.sum / n;
    m.m2 = dev.squares - dev.sum * dev.sum / n;
    if (m.m2 < C(0)) m.m2 = C(0);                              // Rounding only; NaN stays NaN.
    if (dev.squares == Num<C>::Highest()) m.m2 = dev.squares;  // Note [Overflowing variance].
  }
  const NormScale<C> s = Scale<Op>(m, sum, len, p.eps);
#pragma unroll
  for (u32 j = 0; j < kPacks; ++j) {
    const u64 first = (j * static_cast<u64>(g.size) + g.lane) * kV;
    if (first >= len) continue;
    Pack<T, kV> w, b;
#pragma unroll
    for (u32 k = 0; k < kV; ++k) w.v[k] = b.v[k] = T(0);
    if constexpr (kAffine >= 1) w = LoadParam<T, kV>(p.w, p.sw, first, len);
    if constexpr (kAffine >= 2) b = LoadParam<T, kV>(p.b, p.sb, first, len);
#pragma unroll
    for (u32 k = 0; k < kV; ++k) {
      v[j].v[k] = NormOut<Op, kAffine>(s, static_cast<C>(v[j].v[k]), w.v[k], b.v[k]);
    }
    if (vy && first + kV <= len) {
      *reinterpret_cast<Pack<T, kV>*>(p.y.p + by + first) = v[j];
    } else {
#pragma unroll
      for (u32 k = 0; k < kV; ++k) {
        if (first + k < len) Store(p.y, by + (first + k) * p.sy, v[j].v[k]);
      }
    }
  }
}

// A row too long for the group's registers: statistics over four loads in flight per thread
// (layer_norm: their moments merged into the thread's), then a second read for the outputs.
template <class Op, int kAffine, class T, class C>
__device__ __forceinline__ void NormStreamedRow(const NormRow<T, C>& p, u64 bx, u64 by,
                                                const Group& g, u32 variant) {
  const u64 len = p.len;
  const u64 step = static_cast<u64>(g.size);
  Moments<C> m = {C(0), C(0), 0u};
  C ss = C(0);
  for (u64 k = g.lane; k < len; k += 4 * step) {
    C v[4];
#pragma unroll
    for (u32 u = 0; u < 4; ++u) {
      const u64 i = k + u * step;
      v[u] = i < len ? static_cast<C>(Load(p.x, bx + i * p.sx)) : C(0);
    }
    if constexpr (Op::kCenter) {
      const u32 n = k + 3 * step < len ? 4u : static_cast<u32>((len - k + step - 1) / step);
      const C sum = (v[0] + v[1]) + (v[2] + v[3]);
      m = Merge(m, CorrectedMoments<C>(sum, n, [&](C mean0, C& s1, C& s2) {
#pragma unroll
                  for (u32 u = 0; u < 4; ++u) {
                    if (u < n) {
                      const C d = v[u] - mean0;
                      s1 += d;
                      s2 += d * d;
                    }
                  }
                }));
    } else {
      ss += (v[0] * v[0] + v[1] * v[1]) + (v[2] * v[2] + v[3] * v[3]);
    }
  }
  if constexpr (Op::kCenter) {
    m = GroupAllReduce<MomentsCombine<C>>(m, variant);
  } else {
    ss = GroupAllReduce<SumCombine<C>>(ss, variant);
  }
  const NormScale<C> s = Scale<Op>(m, ss, len, p.eps);
  for (u64 k = g.lane; k < len; k += step) {
    const T w = kAffine >= 1 ? Load(p.w, k * p.sw) : T(0);
    const T b = kAffine >= 2 ? Load(p.b, k * p.sb) : T(0);
    const C x = static_cast<C>(Load(p.x, bx + k * p.sx));
    Store(p.y, by + k * p.sy, NormOut<Op, kAffine>(s, x, w, b));
  }
}

template <class Op, class T, int kAffine>
__global__ void __launch_bounds__(1024) NormKernel(const __grid_constant__ CudaBuiltinArgs a) {
  typedef typename ComputeOf<T>::type C;
  constexpr int kOut = kAffine + 1;
  const CudaTensorArg& out = a.buffers[kOut];
  if (out.rank == 0 || out.rank > CUBED_CUDA_MAX_RANK) return;
  const u32 last = out.rank - 1;
  NormRow<T, C> p;
  p.x = BufOf<const T>(a.buffers[0]);
  p.w = BufOf<const T>(a.buffers[kAffine >= 1 ? 1 : 0]);
  p.b = BufOf<const T>(a.buffers[kAffine >= 2 ? 2 : 0]);
  p.y = BufOf<T>(out);
  p.len = out.shape[last];
  p.sx = a.buffers[0].strides[last];
  p.sy = out.strides[last];
  p.sw = kAffine >= 1 ? a.buffers[1].strides[0] : 0;
  p.sb = kAffine >= 2 ? a.buffers[2].strides[0] : 0;
  p.eps = Convert<C>(__longlong_as_double(static_cast<long long>(a.scalar)));
  const Group g = GroupOf(a.variant);
  const int tensors[2] = {0, kOut};
  const bool cached =
      p.len <= static_cast<u64>(g.size) * (CUBED_CUDA_SOFTMAX_CACHE_BYTES / sizeof(T));
  for (u64 r = static_cast<u64>(blockIdx.x) * g.per_block + g.index; r < a.count;
       r += static_cast<u64>(gridDim.x) * g.per_block) {
    u64 off[2];
    Unravel<2>(a, tensors, kOut, out.rank, last, r, off);
    if (cached && DenseRow<kAffine>(p, off[0], off[1])) {
      NormDenseRow<Op, kAffine>(p, off[0], off[1], g, a.variant);
    } else if (cached) {
      NormCachedRow<Op, kAffine>(p, off[0], off[1], g, a.variant);
    } else {
      NormStreamedRow<Op, kAffine>(p, off[0], off[1], g, a.variant);
    }
  }
}

}  // namespace cubed
