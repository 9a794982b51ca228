// causal_attention: q [..., L, E], k [..., S, E], v [..., S, Ev] -> out [..., L, Ev], batch dims
// broadcast (stride 0), any strides: out row i = softmax over keys s <= i of scale * q_i . k_s,
// times v (Note [Causal rows] in kernels/cpu/softmax.cc), never holding the [L, S] scores in
// memory. Two paths (Note [Attention paths]); both write each output element once.
#include "common.cuh"

namespace cubed {

// Note [Attention paths]
// CUBED_CUDA_ATTENTION_MMA (chosen on the host for f16 and bf16 with E = Ev = 64, unit column
// strides and 16-byte aligned rows): flash attention on the tensor cores (sm_80 and later). A
// block takes 128 queries of one batch: 4 warps of 32 queries (each K and V fragment read from
// shared memory serves two 16-query MMA tiles; 255 registers, 2 blocks an SM), or with
// CUBED_CUDA_ATTENTION_MMA_THREADS 256, 8 warps of 16 (128 registers); K and V stream through
// shared memory in tiles of 64 keys (cp.async, two stages: Note [Attention pipeline]), scores
// and the running output stay in registers (mma.sync m16n8k16, f32 accumulation), the softmax
// is online (running maximum and sum, the output rescaled when a maximum grows past 2^8 times
// its base), and P is rounded to the input type before P V, as flash attention does. Tiles past
// a query tile's diagonal are never loaded. Otherwise (and on older GPUs, or pointers not 16-byte
// aligned) the generic path: a warp per query row, two passes over its keys (maximum and sum, then
// the output in column chunks), every score recomputed per chunk; f64 computes in f64, the rest in
// f32.

constexpr u32 kAttnRows = CUBED_CUDA_ATTENTION_MMA_ROWS;        // Per block, MMA path.
constexpr u32 kAttnKeys = 64;                                   // Keys per tile.
constexpr u32 kAttnDim = 64;                                    // E = Ev of the MMA path.
constexpr u32 kAttnThreads = CUBED_CUDA_ATTENTION_MMA_THREADS;  // The launch's block.
constexpr u32 kAttnM = kAttnRows / (kAttnThreads / 2);          // 16-query MMA tiles a warp.
static_assert(kAttnM * 16 * (kAttnThreads / 32) == kAttnRows && kAttnM <= 2, "1 or 2 tiles");
constexpr u32 kAttnTileBytes = kAttnKeys * kAttnDim * 2;  // A K or V tile in shared memory.
// Growth of a row maximum, in log2 units, that moves the softmax's base (p stays below 2^8).
constexpr float kAttnRescaleLog2 = 8.f;
// Shared memory of the MMA path: the Q tile, then two stages of (K tile, V tile).
constexpr u32 kAttnSharedElems = (kAttnRows + 4 * kAttnKeys) * kAttnDim;
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

// Copies `kRows` rows of 64 elements (row stride `stride` elements, from element `base` of `src`)
// into the swizzled tile at shared address `dst`, rows at or past `valid` (and any chunk outside
// the buffer) as zeros; asynchronous (cp.async), completed by the caller's wait. Thread x of the
// block's kAttnThreads copies the 16-byte chunk x % 8 of rows x / 8 + i * kAttnThreads / 8: a
// multiple of 8 apart, so one swizzled offset serves all of them.
template <u32 kRows, class T>
__device__ __forceinline__ void CopyRows(u32 dst, const Buf<const T>& src, u64 base, u64 stride,
                                         u64 valid) {
  constexpr u32 kStep = kAttnThreads / 8;  // Rows a pass of the block copies.
  static_assert(kRows % kStep == 0 && kStep % 8 == 0, "whole passes, one swizzle");
  const u32 row0 = threadIdx.x >> 3, chunk = threadIdx.x & 7u;
  const u32 to = dst + 2 * Swizzled(row0, chunk * 8);
  // The same for the whole block: every row valid and in the buffer (strides are unsigned, so
  // the last row's end bounds them all), as in every tile but a tensor's last: no test per chunk.
  if (valid >= kRows && base + (kRows - 1) * stride + kAttnDim <= src.n) {
    const T* from = src.p + base + row0 * stride + chunk * 8;
#pragma unroll
    for (u32 i = 0; i < kRows / kStep; ++i) {
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(to + i * kStep * 128),
                   "l"(from));
      from += kStep * stride;
    }
    return;
  }
  const u32 rows = static_cast<u32>(valid < kRows ? valid : kRows);
#pragma unroll
  for (u32 i = 0; i < kRows / kStep; ++i) {
    const u32 row = row0 + i * kStep;
    const u64 index = base + row * stride + chunk * 8;
    const bool in = row < rows && index + 8 <= src.n;
    const void* from =
        in ? static_cast<const void*>(src.p + index) : static_cast<const void*>(src.p);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to + i * kStep * 128),
                 "l"(from), "r"(in ? 16 : 0));
  }
}

// A K or V tensor's tiles of kAttnKeys rows as this thread copies them: the byte address of its
// chunk in the next tile's first row (row threadIdx.x / 8, chunk threadIdx.x % 8), the bytes
// between its rows (kAttnThreads / 8 rows apart), and the buffer's end.
struct TileStream {
  u64 at, pass, end, begin;
};
template <class T>
__device__ __forceinline__ TileStream StreamOf(const CudaTensorArg& t, u64 off, u64 stride) {
  TileStream r;
  r.begin = t.ptr;
  r.end = t.ptr + t.bytes / sizeof(T) * sizeof(T);
  r.pass = stride * (kAttnThreads / 8) * sizeof(T);
  r.at = t.ptr + (off + (threadIdx.x >> 3) * stride + (threadIdx.x & 7u) * 8) * sizeof(T);
  return r;
}

// Copies the next tile of `s` (its rows from `valid` on, and any chunk past the buffer, as zeros)
// into the swizzled tile at shared address `dst`, as CopyRows does, and moves `s` to the tile
// after it: four 64-bit adds and a test a thread when the tile is whole.
__device__ __forceinline__ void CopyTile(u32 dst, TileStream& s, u32 valid) {
  constexpr u32 kStep = kAttnThreads / 8;
  constexpr u32 kPasses = kAttnKeys / kStep;
  static_assert(kAttnKeys % kStep == 0 && kStep % 8 == 0, "whole passes, one swizzle");
  const u32 row0 = threadIdx.x >> 3, chunk = threadIdx.x & 7u;
  const u32 to = dst + 2 * Swizzled(row0, chunk * 8);
  u64 from[kPasses];
#pragma unroll
  for (u32 i = 0; i < kPasses; ++i) from[i] = s.at + i * s.pass;
  s.at = from[kPasses - 1] + s.pass;
  if (valid >= kAttnKeys && from[kPasses - 1] + 16 <= s.end) {
#pragma unroll
    for (u32 i = 0; i < kPasses; ++i) {
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(to + i * kStep * 128),
                   "l"(from[i]));
    }
    return;
  }
#pragma unroll
  for (u32 i = 0; i < kPasses; ++i) {
    const bool in = row0 + i * kStep < valid && from[i] + 16 <= s.end;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to + i * kStep * 128),
                 "l"(in ? from[i] : s.begin), "r"(in ? 16 : 0));
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

// The greater of a and b, NaN when either is (FMNMX.NAN, one instruction); which zero of +0 and
// -0 it returns does not matter here (2^(x - m) is the same).
__device__ __forceinline__ float MaxNan(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;\n" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
__device__ __forceinline__ float QuadMax(float x) {
  x = MaxNan(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return MaxNan(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float QuadSum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Note [Attention pipeline]
// The MMA path's block loads Q and K/V tile 0, then for each key tile j: waits for tile j's copy,
// one barrier (every warp is done with tile j - 1, whose stage tile j + 1 reuses), starts the copy
// of tile j + 1 into the other stage, and computes tile j, so that each copy has a whole tile's
// math to land in. A warp whose queries all precede the tile's first key skips it (its P would
// be zeros). The row maxima are of the raw scores q . k (the scale is made >= 0 by negating Q
// in shared memory, exact in f16 and bf16), so that p = 2^(s * scale log2(e) - m scale log2(e)) is
// one FFMA and one ex2; masked keys (past the diagonal or S) are -inf for the maximum and p = 0.
// The base m of a row's p = 2^((s - m) scale log2(e)) is a past maximum, not always the latest:
// a warp moves its rows' bases to their maxima, rescaling the output and sums, only when some
// row's maximum grew by more than 2^8 (as flash attention 4 does), so p stays below about 2^8 and
// the multiplies of a rescale run only in the first tiles of most rows; out = acc / l either way.
// The rescale test is one vote a tile for all the warp's rows, before any exponential, so that
// the exponentials and the P V MMAs are one straight-line block, interleaved (the exponentials
// of P's key columns 16 kk.. beside the MMAs of the columns before them).
template <class T>
__device__ void AttentionMma(const CudaBuiltinArgs& a, unsigned short* smem) {
  const Buf<const T> q = BufOf<const T>(a.buffers[0]);
  const Buf<T> o = BufOf<T>(a.buffers[3]);
  const u32 r = a.buffers[3].rank;
  // Row counts and indices in 32 bits: every tensor holds fewer than 2^32 elements (its
  // metadata's logical_len is a u32, docs/kernel-abi.md).
  const u32 len_q = static_cast<u32>(a.buffers[3].shape[r - 2]);
  const u32 len_k = static_cast<u32>(a.buffers[1].shape[r - 2]);
  const u64 q_rs = a.buffers[0].strides[r - 2], k_rs = a.buffers[1].strides[r - 2];
  const u64 v_rs = a.buffers[2].strides[r - 2];
  const u64 o_rs = a.buffers[3].strides[r - 2], o_cs = a.buffers[3].strides[r - 1];
  // Scores in the base-2 domain: x = scale * log2(e) * q . k, p = 2^(x - max). A negative scale
  // negates Q instead (the products negate exactly), so that scale2 >= 0 keeps the order.
  const double scale = __longlong_as_double(static_cast<long long>(a.scalar));
  const float scale2 = static_cast<float>((scale < 0 ? -scale : scale) * 1.4426950408889634);
  const u32 q_sign = scale < 0 ? 0x80008000u : 0u;
  const u32 warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
  const u32 g = lane >> 2, t = lane & 3u;  // The MMA fragments' row group and column pair.
  const u32 qs = SharedAddress(smem);      // [kAttnRows][64], then the stages.
  const u32 stages = qs + kAttnRows * kAttnDim * 2;
  // ldmatrix row addresses within a tile (bytes; Swizzled, the chunk's XOR split out): K's for
  // keys n * 8 + (lane & 7), columns kp * 32 + (lane >> 3) * 8 at (k_base ^ kp * 64) + n * 1024;
  // V's (transposed) for keys kk * 16 + (lane & 15), columns dp * 16 + (lane >> 4) * 8 at
  // (v_base ^ dp * 32) + kk * 2048.
  const u32 r8 = lane & 7u;
  // This warp's queries 16 mi.. as A fragments: columns kk * 16.. at
  // (q_at + mi * 2048) ^ (kk * 32) (bytes).
  const u32 q_at = qs + 2 * Swizzled(warp * 16 * kAttnM + (lane & 15u), (lane >> 4) * 8);
  const u32 k_base = 2 * (r8 * kAttnDim + (((lane >> 3) ^ r8) << 3));
  const u32 v_base = 2 * ((lane & 15u) * kAttnDim + (((lane >> 4) ^ r8) << 3));
  // Out's count * len_q * 64 elements are below 2^32, so 32 bits count the tiles.
  const u32 q_tiles = (len_q + kAttnRows - 1) / kAttnRows;
  const u32 tiles = static_cast<u32>(a.count) * q_tiles;
  for (u32 tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    // The longest tiles (the last queries see the most keys) first, over every batch.
    const u32 count = static_cast<u32>(a.count);
    const u32 b = tile % count;
    const u32 q0 = (q_tiles - 1 - tile / count) * kAttnRows;
    // AttentionBatch's offset of tensor i, in 32 bits and a loop (fewer registers); out's is
    // computed after the key loop, so that it holds no registers there.
    auto batch_offset = [&](u32 i) {
      u64 off = 0;
      u32 linear = b;
#pragma unroll 1
      for (u32 d = r - 2; d-- > 0;) {
        const u32 extent = static_cast<u32>(a.buffers[3].shape[d]);
        off += static_cast<u64>(linear % extent) * a.buffers[i].strides[d];
        linear /= extent;
      }
      return off;
    };
    TileStream ks_in = StreamOf<T>(a.buffers[1], batch_offset(1), k_rs);
    TileStream vs_in = StreamOf<T>(a.buffers[2], batch_offset(2), v_rs);
    const u32 q_end = q0 + kAttnRows < len_q ? q0 + kAttnRows : len_q;
    const u32 keys = len_k < q_end ? len_k : q_end;  // Keys any query of the tile sees.
    const u32 key_tiles = (keys + kAttnKeys - 1) / kAttnKeys;
    __syncthreads();  // The previous tile's warps are done with every shared tile.
    CopyRows<kAttnRows>(qs, q, batch_offset(0) + q0 * q_rs, q_rs, len_q - q0);
    if (key_tiles > 0) {
      CopyTile(stages, ks_in, len_k);
      CopyTile(stages + kAttnTileBytes, vs_in, len_k);
    }
    CommitLoads();
    if (q_sign != 0 && key_tiles > 0) {  // Negates this warp's rows of Q in place.
      WaitLoads();
      __syncthreads();  // Other threads copied them.
      u32* const rows = reinterpret_cast<u32*>(smem + warp * 16 * kAttnM * kAttnDim);
#pragma unroll
      for (u32 i = lane; i < 16 * kAttnM * kAttnDim / 2; i += 32) rows[i] ^= q_sign;
      __syncwarp();
    }
    // Per 16-query tile mi: the output, running maxima of the raw scores (rows g, g + 8) and
    // sums (this thread's part).
    float acc[kAttnM][kAttnDim / 8][4];
    float m[kAttnM][2], l[kAttnM][2];
#pragma unroll
    for (u32 mi = 0; mi < kAttnM; ++mi) {
#pragma unroll
      for (u32 n = 0; n < kAttnDim / 8; ++n) {
        acc[mi][n][0] = acc[mi][n][1] = acc[mi][n][2] = acc[mi][n][3] = 0.f;
      }
      m[mi][0] = m[mi][1] = Num<float>::Lowest();
      l[mi][0] = l[mi][1] = 0.f;
    }
    const u32 first_row = q0 + warp * 16 * kAttnM;
    const u32 row_g = first_row + g;  // Rows row_g + 16 mi + 8 h.
    // Key tiles this warp computes (its last query sees up to key first_row + 16 kAttnM - 1),
    // and the first that needs the mask (keys past the diagonal of its first query, or past S).
    const u32 last_tile = (first_row + 16 * kAttnM - 1) / kAttnKeys;
    const u32 warp_tiles = last_tile < key_tiles ? last_tile + 1 : key_tiles;
    const u32 unmasked = (first_row < len_k ? first_row : len_k) / kAttnKeys;
    const u32 mask_from = unmasked < key_tiles ? unmasked : key_tiles;
    // S = Q K^T for this warp's queries and the tile's 64 keys, its softmax into P, and O += P V.
    // Keys past the diagonal of this warp's first query, or past S, are masked: key k0 + c (c
    // the column in the tile) is visible to row r when c < min(r - k0 + 1, S - k0), as a bound
    // within [0, 64] on c. Called with constants, inlined twice, so that the tiles below the
    // diagonal test nothing per element; each copy is straight-line code after its rescale
    // branch, so that the exponentials of P's key columns 16 kk.. interleave with the MMAs of
    // the columns before them.
    auto step = [&](const u32 j, const bool masked) {
      const u32 k0 = j * kAttnKeys;
      const u32 ks = stages + (j & 1u) * 2 * kAttnTileBytes, vs = ks + kAttnTileBytes;
      // Each K fragment serves the warp's kAttnM query tiles.
      float s[kAttnM][kAttnKeys / 8][4];
#pragma unroll
      for (u32 mi = 0; mi < kAttnM; ++mi) {
#pragma unroll
        for (u32 n = 0; n < kAttnKeys / 8; ++n) {
          s[mi][n][0] = s[mi][n][1] = s[mi][n][2] = s[mi][n][3] = 0.f;
        }
      }
#pragma unroll
      for (u32 kp = 0; kp < kAttnDim / 32; ++kp) {
        // The queries' columns kp * 32.. (A fragments, reloaded each tile: fewer registers
        // across the loop).
        u32 qf[kAttnM][2][4];
#pragma unroll
        for (u32 mi = 0; mi < kAttnM; ++mi) {
          LoadMatrices(qf[mi][0], (q_at + mi * 2048) ^ (kp * 64));
          LoadMatrices(qf[mi][1], (q_at + mi * 2048) ^ (kp * 64 + 32));
        }
#pragma unroll
        for (u32 n = 0; n < kAttnKeys / 8; ++n) {
          u32 bf[4];
          LoadMatrices(bf, ks + (k_base ^ (kp * 64)) + n * 1024);
#pragma unroll
          for (u32 mi = 0; mi < kAttnM; ++mi) {
            Mma<T>(s[mi][n], qf[mi][0], bf[0], bf[1]);
            Mma<T>(s[mi][n], qf[mi][1], bf[2], bf[3]);
          }
        }
      }
      u32 vis[kAttnM][2];  // Rows g and g + 8 of query tile mi.
#pragma unroll
      for (u32 mi = 0; mi < kAttnM; ++mi) {
        vis[mi][0] = vis[mi][1] = kAttnKeys;
        if (masked) {
          const u32 tile_end = len_k - k0 < kAttnKeys ? len_k - k0 : kAttnKeys;
#pragma unroll
          for (u32 h = 0; h < 2; ++h) {  // Rows before k0 see none of the tile.
            const u32 row = row_g + 16 * mi + 8 * h;
            const u32 seen = row + 1 > k0 ? row + 1 - k0 : 0;
            vis[mi][h] = seen < tile_end ? seen : tile_end;
          }
#pragma unroll
          for (u32 n = 0; n < kAttnKeys / 8; ++n) {
#pragma unroll
            for (u32 c = 0; c < 4; ++c) {
              if (n * 8 + 2 * t + (c & 1u) >= vis[mi][c >> 1]) s[mi][n][c] = Num<float>::Lowest();
            }
          }
        }
      }
      // In the scaled domain: a row that has seen only masked keys keeps maximum -inf, and
      // subtracts 0 instead (its p are 0). Every query sees key 0, so no stored row ends so.
      // The bases m move (and the output and sums are rescaled) only when some row of the
      // warp's grew past its base by more than kAttnRescaleLog2 (Note [Attention pipeline]).
      const float ninf = Num<float>::Lowest();
      float mx[kAttnM][2];
#pragma unroll
      for (u32 mi = 0; mi < kAttnM; ++mi) {
#pragma unroll
        for (u32 h = 0; h < 2; ++h) {
          mx[mi][h] = m[mi][h];
#pragma unroll
          for (u32 n = 0; n < kAttnKeys / 8; ++n) {
            mx[mi][h] = MaxNan(mx[mi][h], MaxNan(s[mi][n][2 * h], s[mi][n][2 * h + 1]));
          }
        }
      }
      bool grow = false;
#pragma unroll
      for (u32 mi = 0; mi < kAttnM; ++mi) {
#pragma unroll
        for (u32 h = 0; h < 2; ++h) {
          mx[mi][h] = QuadMax(mx[mi][h]);
          grow = grow || m[mi][h] == ninf || (mx[mi][h] - m[mi][h]) * scale2 > kAttnRescaleLog2;
        }
      }
      if (__any_sync(0xffffffffu, grow)) {
#pragma unroll
        for (u32 mi = 0; mi < kAttnM; ++mi) {
          float corr[2];
#pragma unroll
          for (u32 h = 0; h < 2; ++h) {
            const float moved = mx[mi][h] == ninf ? 0.f : mx[mi][h] * scale2;
            corr[h] = Exp2((m[mi][h] == ninf ? ninf : m[mi][h] * scale2) - moved);
            m[mi][h] = mx[mi][h];
            l[mi][h] *= corr[h];
          }
#pragma unroll
          for (u32 n = 0; n < kAttnDim / 8; ++n) {
            acc[mi][n][0] *= corr[0];
            acc[mi][n][1] *= corr[0];
            acc[mi][n][2] *= corr[1];
            acc[mi][n][3] *= corr[1];
          }
        }
      }
      float base[kAttnM][2];
#pragma unroll
      for (u32 mi = 0; mi < kAttnM; ++mi) {
#pragma unroll
        for (u32 h = 0; h < 2; ++h) base[mi][h] = m[mi][h] == ninf ? 0.f : m[mi][h] * scale2;
      }
      // P's key columns 16 kk.. as A fragments, then O += P V for them; each V fragment serves
      // the warp's kAttnM query tiles.
#pragma unroll
      for (u32 kk = 0; kk < kAttnKeys / 16; ++kk) {
        u32 pf[kAttnM][4];
#pragma unroll
        for (u32 mi = 0; mi < kAttnM; ++mi) {
#pragma unroll
          for (u32 half = 0; half < 2; ++half) {
            const u32 n = 2 * kk + half;
            float p[4];
#pragma unroll
            for (u32 c = 0; c < 4; ++c) {
              p[c] = Exp2(fmaf(s[mi][n][c], scale2, -base[mi][c >> 1]));
              // A masked key's p is 0 (with scale2 = 0 the FFMA of its -inf would be NaN).
              if (masked && n * 8 + 2 * t + (c & 1u) >= vis[mi][c >> 1]) p[c] = 0.f;
            }
            l[mi][0] += p[0] + p[1];
            l[mi][1] += p[2] + p[3];
            pf[mi][half * 2] = PackPair<T>(p[0], p[1]);
            pf[mi][half * 2 + 1] = PackPair<T>(p[2], p[3]);
          }
        }
#pragma unroll
        for (u32 dp = 0; dp < kAttnDim / 16; ++dp) {
          u32 bf[4];
          LoadMatricesTransposed(bf, vs + (v_base ^ (dp * 32)) + kk * 2048);
#pragma unroll
          for (u32 mi = 0; mi < kAttnM; ++mi) {
            Mma<T>(acc[mi][2 * dp], pf[mi], bf[0], bf[1]);
            Mma<T>(acc[mi][2 * dp + 1], pf[mi], bf[2], bf[3]);
          }
        }
      }
    };
    for (u32 j = 0; j < key_tiles; ++j) {
      const u32 k0 = j * kAttnKeys;
      WaitLoads();
      __syncthreads();          // Tile j (and Q) landed; every warp is done with tile j - 1.
      if (j + 1 < key_tiles) {  // Into the stage tile j - 1 used.
        const u32 next = stages + ((j + 1) & 1u) * 2 * kAttnTileBytes;
        const u32 k1 = k0 + kAttnKeys;
        CopyTile(next, ks_in, len_k - k1);
        CopyTile(next + kAttnTileBytes, vs_in, len_k - k1);
        CommitLoads();
      }
      if (j >= warp_tiles) continue;  // No query of this warp sees the tile's keys.
      if (j >= mask_from) {           // k0 + 64 > first_row or k0 + 64 > len_k.
        step(j, true);
      } else {
        step(j, false);
      }
    }
    const u64 o_off = batch_offset(3);
#pragma unroll
    for (u32 mi = 0; mi < kAttnM; ++mi) {
#pragma unroll
      for (u32 h = 0; h < 2; ++h) {
        const u32 row = row_g + 16 * mi + 8 * h;
        const float sum = QuadSum(l[mi][h]);
        if (row >= len_q) continue;
        const float inv = sum == 0.f ? 0.f : 1.f / sum;  // No keys: zeros.
        const u64 at = o_off + row * o_rs;               // Column 0 of the row.
        if (o_cs == 1 && at + kAttnDim <= o.n && Aligned(o.p + at, 4)) {
          Pack<T, 2>* const pairs = reinterpret_cast<Pack<T, 2>*>(o.p + at) + t;
#pragma unroll
          for (u32 n = 0; n < kAttnDim / 8; ++n) {
            Pack<T, 2> pair;
            pair.v[0] = static_cast<T>(acc[mi][n][2 * h] * inv);
            pair.v[1] = static_cast<T>(acc[mi][n][2 * h + 1] * inv);
            pairs[n * 4] = pair;
          }
        } else {
#pragma unroll
          for (u32 n = 0; n < kAttnDim / 8; ++n) {
            const u64 col = at + (n * 8 + 2 * t) * o_cs;
            Store(o, col, static_cast<T>(acc[mi][n][2 * h] * inv));
            Store(o, col + o_cs, static_cast<T>(acc[mi][n][2 * h + 1] * inv));
          }
        }
      }
    }
    WaitLoads();  // With no keys, the Q tile's copy is still in flight.
  }
}

#endif  // __CUDA_ARCH__ >= 800

template <class T>
__global__ void __launch_bounds__(kAttnThreads, 2)
    AttentionKernel(const __grid_constant__ CudaBuiltinArgs a) {
  const u32 rank = a.buffers[3].rank;
  if (rank < 2 || rank > CUBED_CUDA_MAX_RANK) return;
  if constexpr (Num<T>::kHalf) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    __shared__ __align__(128) unsigned short smem[kAttnSharedElems];
    bool aligned = a.variant == CUBED_CUDA_ATTENTION_MMA && blockDim.x == kAttnThreads;
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
