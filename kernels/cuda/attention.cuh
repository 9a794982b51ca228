// causal_attention: q [..., L, E], k [..., S, E], v [..., S, Ev] -> out [..., L, Ev], batch dims
// broadcast (stride 0), any strides: out row i = softmax over keys s <= i of scale * q_i . k_s,
// times v (Note [Causal rows] in kernels/cpu/softmax.cc), never holding the [L, S] scores in
// memory. Two paths (Note [Attention paths]); both write each output element once.
#include "common.cuh"

namespace cubed {

// Note [Attention paths]
// CUBED_CUDA_ATTENTION_MMA (chosen on the host for f16 and bf16 with E = Ev = 64, unit column
// strides and 16-byte aligned rows): flash attention on the tensor cores (sm_80 and later). A
// block of 8 warps takes 128 queries of one batch, each warp 16 of them; K and V stream through
// shared memory in tiles of 64 keys (cp.async, the next tile's load overlapping this one's math),
// scores and the running output stay in registers (mma.sync m16n8k16, f32 accumulation), the
// softmax is online (running maximum and sum, the output rescaled when the maximum grows), and
// P is rounded to the input type before P V, as flash attention does. Tiles past a query tile's
// diagonal are never loaded. Otherwise (and on older GPUs, or pointers not 16-byte aligned) the
// generic path: a warp per query row, two passes over its keys (maximum and sum, then the output
// in column chunks), every score recomputed per chunk; f64 computes in f64, the rest in f32.

constexpr u32 kAttnRows = CUBED_CUDA_ATTENTION_MMA_ROWS;  // Per block, MMA path: 8 warps x 16.
constexpr u32 kAttnKeys = 64;                             // Keys per tile.
constexpr u32 kAttnDim = 64;                              // E = Ev of the MMA path.
constexpr u32 kAttnChunk = 4;  // Output columns per lane per pass of the generic path.

// Element offsets of batch `b` in q, k, v and out (out's dims before the last two).
__device__ __forceinline__ void AttentionBatch(const CudaBuiltinArgs& a, u64 b, u64 (&off)[4]) {
  const int tensors[4] = {0, 1, 2, 3};
  const u32 rank = a.buffers[3].rank;
  Unravel<4>(a, tensors, 3, rank - 2, CUBED_CUDA_MAX_RANK, b, off);
}

template <class T>
__device__ void AttentionGeneric(const CudaBuiltinArgs& a) {
  typedef typename ComputeOf<T>::type C;
  const Buf<const T> q = BufOf<const T>(a.buffers[0]);
  const Buf<const T> k = BufOf<const T>(a.buffers[1]);
  const Buf<const T> v = BufOf<const T>(a.buffers[2]);
  const Buf<T> o = BufOf<T>(a.buffers[3]);
  const u32 r = a.buffers[3].rank;
  const u64 len_q = a.buffers[3].shape[r - 2], ev = a.buffers[3].shape[r - 1];
  const u64 e = a.buffers[0].shape[r - 1], len_k = a.buffers[1].shape[r - 2];
  const u64 q_rs = a.buffers[0].strides[r - 2], q_cs = a.buffers[0].strides[r - 1];
  const u64 k_rs = a.buffers[1].strides[r - 2], k_cs = a.buffers[1].strides[r - 1];
  const u64 v_rs = a.buffers[2].strides[r - 2], v_cs = a.buffers[2].strides[r - 1];
  const u64 o_rs = a.buffers[3].strides[r - 2], o_cs = a.buffers[3].strides[r - 1];
  const C scale = Convert<C>(__longlong_as_double(static_cast<long long>(a.scalar)));
  const u32 lane = threadIdx.x & 31u;
  const u64 rows = ev == 0 ? 0 : a.count * len_q;  // Out's elements / Ev: below 2^32.
  const u64 warps = GridThreads() / 32;
  for (u64 row = GlobalThread() / 32; row < rows; row += warps) {
    u64 b = row;
    const u64 i = NextCoordinate(b, len_q);
    u64 off[4];
    AttentionBatch(a, b, off);
    const u64 qi = off[0] + i * q_rs;
    const u64 visible = len_k < i + 1 ? len_k : i + 1;
    auto score = [&](u64 s) {
      const u64 ks = off[1] + s * k_rs;
      C dot = C(0);
      for (u64 j = lane; j < e; j += 32) {
        dot += static_cast<C>(Load(q, qi + j * q_cs)) * static_cast<C>(Load(k, ks + j * k_cs));
      }
      return WarpAllReduce<SumCombine<C>>(dot) * scale;
    };
    C m = Num<C>::Lowest(), sum = C(0);
    for (u64 s = 0; s < visible; ++s) {  // Online: one pass for the maximum and the sum.
      const C x = score(s);
      if (x > m) {
        sum = sum * Exp(m - x) + C(1);
        m = x;
      } else {
        sum += Exp(x - m);  // NaN (x or m) stays NaN.
      }
    }
    const C inv = sum == C(0) ? C(0) : C(1) / sum;  // No keys: zeros.
    for (u64 c0 = 0; c0 < ev; c0 += 32 * kAttnChunk) {
      C acc[kAttnChunk];
#pragma unroll
      for (u32 u = 0; u < kAttnChunk; ++u) acc[u] = C(0);
      for (u64 s = 0; s < visible; ++s) {
        const C p = Exp(score(s) - m);
        const u64 vs = off[2] + s * v_rs;
#pragma unroll
        for (u32 u = 0; u < kAttnChunk; ++u) {
          const u64 c = c0 + lane + 32 * u;
          if (c < ev) acc[u] += p * static_cast<C>(Load(v, vs + c * v_cs));
        }
      }
#pragma unroll
      for (u32 u = 0; u < kAttnChunk; ++u) {
        const u64 c = c0 + lane + 32 * u;
        if (c < ev) Store(o, off[3] + i * o_rs + c * o_cs, static_cast<T>(acc[u] * inv));
      }
    }
  }
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800

// Shared-memory tiles of 64-element rows (128 bytes), the 16-byte chunks of row `row` permuted
// by row & 7, so that ldmatrix's eight row reads hit eight different bank groups.
__device__ __forceinline__ u32 Swizzled(u32 row, u32 col) {
  return row * kAttnDim + ((((col >> 3) ^ row) & 7u) << 3) + (col & 7u);
}

__device__ __forceinline__ u32 SharedAddress(const void* p) {
  return static_cast<u32>(__cvta_generic_to_shared(p));
}

// Copies `rows` rows of 64 elements (row stride `stride` elements, from element `base` of `src`)
// into the swizzled tile `dst`, rows at or past `valid` (and any chunk outside the buffer) as
// zeros; asynchronous (cp.async), completed by the caller's wait.
template <class T>
__device__ __forceinline__ void LoadTile(unsigned short* dst, const Buf<const T>& src, u64 base,
                                         u64 stride, u32 rows, u64 valid) {
  constexpr u32 kChunks = kAttnDim / 8;
  for (u32 c = threadIdx.x; c < rows * kChunks; c += blockDim.x) {
    const u32 row = c / kChunks, chunk = c % kChunks;
    const u64 index = base + row * stride + chunk * 8;
    const bool in = row < valid && index + 8 <= src.n;
    const void* from =
        in ? static_cast<const void*>(src.p + index) : static_cast<const void*>(src.p);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                     SharedAddress(dst + Swizzled(row, chunk * 8))),
                 "l"(from), "r"(in ? 16 : 0));
  }
}

__device__ __forceinline__ void CommitLoads() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void WaitLoads() { asm volatile("cp.async.wait_group 0;\n" ::); }

__device__ __forceinline__ void LoadMatrices(u32 (&r)[4], u32 address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
__device__ __forceinline__ void LoadMatricesTransposed(u32 (&r)[4], u32 address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// d += a b on the tensor cores: a 16 x 16 (row), b 16 x 8 (col), d 16 x 8 f32.
template <class T>
__device__ __forceinline__ void Mma(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  if constexpr (Same<T, BF16>::value) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats rounded to T, `lo` in the low half (the lower column).
template <class T>
__device__ __forceinline__ u32 PackPair(float lo, float hi) {
  u32 r;
  if constexpr (Same<T, BF16>::value) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  }
  return r;
}

__device__ __forceinline__ float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Maximum that ignores neither operand's NaN (as Max), over a quad of lanes.
__device__ __forceinline__ float QuadMax(float x) {
  x = Max(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return Max(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float QuadSum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

template <class T>
__device__ void AttentionMma(const CudaBuiltinArgs& a, unsigned short* smem) {
  unsigned short* const qs = smem;                       // [128][64]
  unsigned short* const ks = qs + kAttnRows * kAttnDim;  // [64][64]
  unsigned short* const vs = ks + kAttnKeys * kAttnDim;  // [64][64]
  const Buf<const T> q = BufOf<const T>(a.buffers[0]);
  const Buf<const T> k = BufOf<const T>(a.buffers[1]);
  const Buf<const T> v = BufOf<const T>(a.buffers[2]);
  const Buf<T> o = BufOf<T>(a.buffers[3]);
  const u32 r = a.buffers[3].rank;
  const u64 len_q = a.buffers[3].shape[r - 2], len_k = a.buffers[1].shape[r - 2];
  const u64 q_rs = a.buffers[0].strides[r - 2], k_rs = a.buffers[1].strides[r - 2];
  const u64 v_rs = a.buffers[2].strides[r - 2];
  const u64 o_rs = a.buffers[3].strides[r - 2], o_cs = a.buffers[3].strides[r - 1];
  // Scores in the base-2 domain: x = scale * log2(e) * q . k, p = 2^(x - max).
  const float scale2 = static_cast<float>(__longlong_as_double(static_cast<long long>(a.scalar)) *
                                          1.4426950408889634);
  const u32 warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
  const u32 g = lane >> 2, t = lane & 3u;  // The MMA fragments' row group and column pair.
  const u64 q_tiles = (len_q + kAttnRows - 1) / kAttnRows;
  const u64 tiles = a.count * q_tiles;
  for (u64 tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    // The longest tiles (the last queries see the most keys) first, over every batch.
    const u64 b = tile % a.count;
    const u64 q0 = (q_tiles - 1 - tile / a.count) * kAttnRows;
    u64 off[4];
    AttentionBatch(a, b, off);
    const u64 q_end = q0 + kAttnRows < len_q ? q0 + kAttnRows : len_q;
    const u64 keys = len_k < q_end ? len_k : q_end;  // Keys any query of the tile sees.
    const u32 key_tiles = static_cast<u32>((keys + kAttnKeys - 1) / kAttnKeys);
    __syncthreads();  // The previous tile's warps are done with every shared tile.
    LoadTile(qs, q, off[0] + q0 * q_rs, q_rs, kAttnRows, len_q - q0);
    if (key_tiles > 0) LoadTile(ks, k, off[1], k_rs, kAttnKeys, len_k);
    CommitLoads();
    u32 qf[kAttnDim / 16][4];  // This warp's 16 queries as MMA A fragments.
    float acc[kAttnDim / 8][4];
#pragma unroll
    for (u32 n = 0; n < kAttnDim / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
    float m_lo = Num<float>::Lowest(), m_hi = m_lo;  // Running maxima: rows g, g + 8.
    float l_lo = 0.f, l_hi = 0.f;                    // Running sums (this thread's part).
    const u64 row_lo = q0 + warp * 16 + g, row_hi = row_lo + 8;
    for (u32 j = 0; j < key_tiles; ++j) {
      const u64 k0 = static_cast<u64>(j) * kAttnKeys;
      WaitLoads();
      __syncthreads();  // K tile j (and Q) landed; every warp is done with V tile j - 1.
      if (j == 0) {
#pragma unroll
        for (u32 kk = 0; kk < kAttnDim / 16; ++kk) {
          LoadMatrices(qf[kk], SharedAddress(qs + Swizzled(warp * 16 + (lane & 15u),
                                                           kk * 16 + (lane >> 4) * 8)));
        }
      }
      LoadTile(vs, v, off[2] + k0 * v_rs, v_rs, kAttnKeys, len_k - k0);
      CommitLoads();
      // S = Q K^T for this warp's 16 queries and the tile's 64 keys.
      float s[kAttnKeys / 8][4];
#pragma unroll
      for (u32 n = 0; n < kAttnKeys / 8; ++n) {
        s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
        for (u32 kp = 0; kp < kAttnDim / 32; ++kp) {
          u32 bf[4];
          LoadMatrices(
              bf, SharedAddress(ks + Swizzled(n * 8 + (lane & 7u), kp * 32 + (lane >> 3) * 8)));
          Mma<T>(s[n], qf[2 * kp], bf[0], bf[1]);
          Mma<T>(s[n], qf[2 * kp + 1], bf[2], bf[3]);
        }
      }
      // Keys past the diagonal of this warp's first query, or past S, are masked: key k0 + c
      // (c the column in the tile) is visible to row r when c < min(r - k0 + 1, S - k0), as a
      // bound within [0, 64] on c.
      const bool masked = k0 + kAttnKeys > q0 + warp * 16 || k0 + kAttnKeys > len_k;
      const u64 tile_end = len_k - k0 < kAttnKeys ? len_k - k0 : kAttnKeys;
      auto visible = [&](u64 row) {  // Rows before k0 see none of the tile.
        const u64 seen = row + 1 > k0 ? row + 1 - k0 : 0;
        return static_cast<u32>(seen < tile_end ? seen : tile_end);
      };
      const u32 vis_lo = visible(row_lo), vis_hi = visible(row_hi);
      float mx_lo = m_lo, mx_hi = m_hi;
#pragma unroll
      for (u32 n = 0; n < kAttnKeys / 8; ++n) {
#pragma unroll
        for (u32 c = 0; c < 4; ++c) {
          const u32 col = n * 8 + 2 * t + (c & 1u);
          float x = s[n][c] * scale2;
          if (masked && col >= (c < 2 ? vis_lo : vis_hi)) x = Num<float>::Lowest();
          s[n][c] = x;
          if (c < 2) {
            mx_lo = Max(mx_lo, x);
          } else {
            mx_hi = Max(mx_hi, x);
          }
        }
      }
      mx_lo = QuadMax(mx_lo);
      mx_hi = QuadMax(mx_hi);
      // A row that has seen only masked keys keeps maximum -inf: subtract 0 instead (its p are
      // 0). Every query sees key 0, so no stored row ends so.
      const float base_lo = mx_lo == Num<float>::Lowest() ? 0.f : mx_lo;
      const float base_hi = mx_hi == Num<float>::Lowest() ? 0.f : mx_hi;
      const float corr_lo = Exp2(m_lo - base_lo), corr_hi = Exp2(m_hi - base_hi);
      m_lo = mx_lo;
      m_hi = mx_hi;
      l_lo *= corr_lo;
      l_hi *= corr_hi;
#pragma unroll
      for (u32 n = 0; n < kAttnDim / 8; ++n) {
        acc[n][0] *= corr_lo;
        acc[n][1] *= corr_lo;
        acc[n][2] *= corr_hi;
        acc[n][3] *= corr_hi;
      }
      u32 pf[kAttnKeys / 16][4];  // P as A fragments of the P V product.
#pragma unroll
      for (u32 n = 0; n < kAttnKeys / 8; ++n) {
        const float p0 = Exp2(s[n][0] - base_lo), p1 = Exp2(s[n][1] - base_lo);
        const float p2 = Exp2(s[n][2] - base_hi), p3 = Exp2(s[n][3] - base_hi);
        l_lo += p0 + p1;
        l_hi += p2 + p3;
        pf[n / 2][(n & 1u) * 2] = PackPair<T>(p0, p1);
        pf[n / 2][(n & 1u) * 2 + 1] = PackPair<T>(p2, p3);
      }
      WaitLoads();
      __syncthreads();  // V tile j landed; every warp is done with K tile j.
      if (j + 1 < key_tiles) {
        LoadTile(ks, k, off[1] + (k0 + kAttnKeys) * k_rs, k_rs, kAttnKeys,
                 len_k - (k0 + kAttnKeys));
        CommitLoads();
      }
      // O += P V.
#pragma unroll
      for (u32 kk = 0; kk < kAttnKeys / 16; ++kk) {
#pragma unroll
        for (u32 dp = 0; dp < kAttnDim / 16; ++dp) {
          u32 bf[4];
          LoadMatricesTransposed(
              bf, SharedAddress(vs + Swizzled(kk * 16 + (lane & 7u) + ((lane >> 3) & 1u) * 8,
                                              dp * 16 + (lane >> 4) * 8)));
          Mma<T>(acc[2 * dp], pf[kk], bf[0], bf[1]);
          Mma<T>(acc[2 * dp + 1], pf[kk], bf[2], bf[3]);
        }
      }
    }
    const float sum_lo = QuadSum(l_lo), sum_hi = QuadSum(l_hi);
    const float inv_lo = sum_lo == 0.f ? 0.f : 1.f / sum_lo;  // No keys: zeros.
    const float inv_hi = sum_hi == 0.f ? 0.f : 1.f / sum_hi;
#pragma unroll
    for (u32 n = 0; n < kAttnDim / 8; ++n) {
      const u64 col = n * 8 + 2 * t;
#pragma unroll
      for (u32 h = 0; h < 2; ++h) {
        const u64 row = h == 0 ? row_lo : row_hi;
        if (row >= len_q) continue;
        const float inv = h == 0 ? inv_lo : inv_hi;
        const T x0 = static_cast<T>(acc[n][2 * h] * inv),
                x1 = static_cast<T>(acc[n][2 * h + 1] * inv);
        const u64 at = off[3] + row * o_rs + col * o_cs;
        if (o_cs == 1 && at + 2 <= o.n && Aligned(o.p + at, 4)) {
          Pack<T, 2> pair;
          pair.v[0] = x0;
          pair.v[1] = x1;
          *reinterpret_cast<Pack<T, 2>*>(o.p + at) = pair;
        } else {
          Store(o, at, x0);
          Store(o, at + o_cs, x1);
        }
      }
    }
    WaitLoads();  // With no keys, the Q tile's copy is still in flight.
  }
}

#endif  // __CUDA_ARCH__ >= 800

template <class T>
__global__ void __launch_bounds__(256, 2)
    AttentionKernel(const __grid_constant__ CudaBuiltinArgs a) {
  const u32 rank = a.buffers[3].rank;
  if (rank < 2 || rank > CUBED_CUDA_MAX_RANK) return;
  if constexpr (Num<T>::kHalf) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    __shared__ __align__(128) unsigned short smem[(kAttnRows + 2 * kAttnKeys) * kAttnDim];
    bool aligned = a.variant == CUBED_CUDA_ATTENTION_MMA && blockDim.x == 256;
    for (u32 i = 0; i < 3; ++i) aligned = aligned && a.buffers[i].ptr % 16 == 0;
    if (aligned) {
      AttentionMma<T>(a, smem);
      return;
    }
#endif
  }
  AttentionGeneric<T>(a);
}

}  // namespace cubed
