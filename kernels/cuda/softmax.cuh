// Softmax along the last axis: buffer 0 the input, buffer 1 the output (same shape; may be the
// input's memory with the same layout). A warp or a block (CUBED_CUDA_GROUP_*) handles one row:
// the row maximum, then exp(x - max) summed, then every exp(x - max) scaled by 1 / sum, as the
// CPU kernel does (NaN or +inf in a row, or a row of -inf only, gives NaN). f16 and bf16 compute
// in f32 and round once on the store. A row that fits in its group's registers
// (CUBED_CUDA_SOFTMAX_CACHE_BYTES a thread) is read once and written once and sums in its compute
// type; a longer row is read three times (max, sum, store) and sums in f64 (f16/bf16: f32).
// causal_softmax is the same kernel with the CausalKeys rule: query row q of the last two dims
// sees keys 0..q, scaled (Note [Causal rows] in kernels/cpu/softmax.cc), and writes 0 past them.
#include "common.cuh"

namespace cubed {

// Which elements of row r take part, and the factor they are multiplied by first.
struct AllKeys {  // softmax: every element, as it is.
  __device__ explicit AllKeys(const CudaBuiltinArgs&) {}
  __device__ u64 Visible(u64, u64 len) const { return len; }
  template <class C>
  __device__ C Apply(C v) const {
    return v;
  }
};
struct CausalKeys {  // causal_softmax: keys 0..q of query q = r % queries, times the scale.
  double scale;
  u64 queries;
  __device__ explicit CausalKeys(const CudaBuiltinArgs& a)
      : scale(__longlong_as_double(static_cast<long long>(a.scalar))),
        queries(a.buffers[1].rank >= 2
                    ? a.buffers[1].shape[(a.buffers[1].rank - 2) % CUBED_CUDA_MAX_RANK]
                    : 1) {
    if (queries == 0) queries = 1;  // No rows then: the launch has no work.
  }
  __device__ u64 Visible(u64 r, u64 len) const {
    const u64 q = (r <= 0xffffffffull && queries <= 0xffffffffull
                       ? static_cast<u32>(r) % static_cast<u32>(queries)  // 32-bit: far cheaper.
                       : r % queries) +
                  1;
    return q < len ? q : len;
  }
  template <class C>
  __device__ C Apply(C v) const {
    return v * static_cast<C>(scale);
  }
};

template <class T>
struct MaxCombine {
  static __device__ T Combine(T a, T b) { return Max(a, b); }
  static __device__ T Shfl(T v, int m) { return ShflXor(v, m); }
};

// One row held in registers: thread `lane` of a group of `size` holds the 16-byte packs
// lane, lane + size, ... (kPacks of them) of the row, element k of pack j at j * kV + k.
// Elements `vis` and later (vis <= len) take no part and are stored as 0.
template <class Rule, class T>
__device__ __forceinline__ void SoftmaxCachedRow(const Buf<const T>& x, u64 bx, u64 sx,
                                                 const Buf<T>& y, u64 by, u64 sy, u64 len, u64 vis,
                                                 const Rule& rule, const Group& g, u32 variant) {
  typedef typename ComputeOf<T>::type C;
  constexpr u32 kV = 16 / sizeof(T);
  constexpr u32 kPacks = CUBED_CUDA_SOFTMAX_CACHE_BYTES / 16;
  const bool vx = sx == 1 && bx + len <= x.n && Aligned(x.p + bx, 16);
  const bool vy = sy == 1 && by + len <= y.n && Aligned(y.p + by, 16);
  Pack<T, kV> v[kPacks];
  C m = Num<C>::Lowest();
#pragma unroll
  for (u32 j = 0; j < kPacks; ++j) {
    const u64 first = (j * static_cast<u64>(g.size) + g.lane) * kV;
    if (first >= vis) {  // Masked whole (causal_softmax): stored as 0, never read.
#pragma unroll
      for (u32 k = 0; k < kV; ++k) v[j].v[k] = static_cast<T>(C(0));
    } else if (vx && first + kV <= len) {
      v[j] = *reinterpret_cast<const Pack<T, kV>*>(x.p + bx + first);
    } else {
#pragma unroll
      for (u32 k = 0; k < kV; ++k) {
        v[j].v[k] = first + k < len ? Load(x, bx + (first + k) * sx) : Num<T>::Lowest();
      }
    }
    if (first + kV <= vis) {  // The whole pack takes part: no test per element.
#pragma unroll
      for (u32 k = 0; k < kV; ++k) m = Max(m, rule.Apply(static_cast<C>(v[j].v[k])));
    } else {
#pragma unroll
      for (u32 k = 0; k < kV; ++k) {
        if (first + k < vis) m = Max(m, rule.Apply(static_cast<C>(v[j].v[k])));
      }
    }
  }
  m = GroupAllReduce<MaxCombine<C>>(m, variant);
  C sum = C(0);
  C e[kPacks][kV];  // exp(x - m), computed once for the sum and the store.
#pragma unroll
  for (u32 j = 0; j < kPacks; ++j) {
    const u64 first = (j * static_cast<u64>(g.size) + g.lane) * kV;
    if (first >= vis) {  // Masked whole: no exp.
#pragma unroll
      for (u32 k = 0; k < kV; ++k) e[j][k] = C(0);
      continue;
    }
    const bool whole = first + kV <= vis;
#pragma unroll
    for (u32 k = 0; k < kV; ++k) {
      const C d = rule.Apply(static_cast<C>(v[j].v[k])) - m;
      C x;
      if constexpr (Num<T>::kHalf) {
        x = HalfExp(d);
      } else {
        x = Exp(d);
      }
      e[j][k] = whole || first + k < vis ? x : C(0);
      sum += e[j][k];
    }
  }
  sum = GroupAllReduce<SumCombine<C>>(sum, variant);
  const C inv = Convert<C>(1.0 / static_cast<double>(sum));
#pragma unroll
  for (u32 j = 0; j < kPacks; ++j) {
    const u64 first = (j * static_cast<u64>(g.size) + g.lane) * kV;
    const bool whole = first + kV <= vis;
#pragma unroll
    for (u32 k = 0; k < kV; ++k) {  // Masked: 0, also when inv is not finite (a row of -inf).
      v[j].v[k] = static_cast<T>(whole || first + k < vis ? e[j][k] * inv : C(0));
    }
    if (vy && first + kV <= len) {
      *reinterpret_cast<Pack<T, kV>*>(y.p + by + first) = v[j];
    } else {
#pragma unroll
      for (u32 k = 0; k < kV; ++k) {
        if (first + k < len) Store(y, by + (first + k) * sy, v[j].v[k]);
      }
    }
  }
}

template <class Rule, class T>
__global__ void __launch_bounds__(1024) SoftmaxKernel(const __grid_constant__ CudaBuiltinArgs a) {
  typedef typename ComputeOf<T>::type C;
  typedef typename Pick<Num<T>::kHalf, float, double>::type S;
  const Buf<const T> x = BufOf<const T>(a.buffers[0]);
  const Buf<T> y = BufOf<T>(a.buffers[1]);
  const u32 rank = a.buffers[1].rank;
  if (rank == 0 || rank > CUBED_CUDA_MAX_RANK) return;
  const u32 last = rank - 1;
  const u64 len = a.buffers[1].shape[last];
  const u64 sx = a.buffers[0].strides[last], sy = a.buffers[1].strides[last];
  const Group g = GroupOf(a.variant);
  const Rule rule(a);
  const int tensors[2] = {0, 1};
  const bool cached =
      len <= static_cast<u64>(g.size) * (CUBED_CUDA_SOFTMAX_CACHE_BYTES / sizeof(T));
  for (u64 r = static_cast<u64>(blockIdx.x) * g.per_block + g.index; r < a.count;
       r += static_cast<u64>(gridDim.x) * g.per_block) {
    u64 off[2];
    Unravel<2>(a, tensors, 1, rank, last, r, off);
    const u64 vis = rule.Visible(r, len);
    if (cached) {
      SoftmaxCachedRow(x, off[0], sx, y, off[1], sy, len, vis, rule, g, a.variant);
      continue;
    }
    auto value = [&](u64 k) { return rule.Apply(static_cast<C>(Load(x, off[0] + k * sx))); };
    C m = Num<C>::Lowest();
    u64 k = g.lane;
    for (; k + 3 * g.size < vis; k += 4 * g.size) {  // Four loads in flight.
      C v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) v[u] = value(k + u * g.size);
      m = Max(Max(m, Max(v[0], v[1])), Max(v[2], v[3]));
    }
    for (; k < vis; k += g.size) m = Max(m, value(k));
    m = GroupAllReduce<MaxCombine<C>>(m, a.variant);
    S sum = S(0);
    for (k = g.lane; k < vis; k += g.size) sum += static_cast<S>(Exp(value(k) - m));
    sum = GroupAllReduce<SumCombine<S>>(sum, a.variant);
    const C inv = Convert<C>(1.0 / static_cast<double>(sum));
    for (k = g.lane; k < len; k += g.size) {
      Store(y, off[1] + k * sy,
            k < vis ? static_cast<T>(Exp(value(k) - m) * inv) : static_cast<T>(C(0)));
    }
  }
}

}  // namespace cubed
