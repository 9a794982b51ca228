// Batched matmul: a [..., M, K] x b [..., K, N] -> out [..., M, N], batch dims of a and b
// broadcast (stride 0 where their dim is 1), any strides. Tiled: a block of 256 threads computes
// a 64 x 64 tile of one batch, each thread a 4 x 4 grid of outputs spaced 16 apart, staging
// 64 x 16 slices of a and 16 x 64 slices of b in shared memory. Accumulates f32 in f32, f64 in
// f64 and integers in their unsigned type (wrapping), as the CPU kernel does; K = 0 writes zeros.
// blockDim.x must be 256; the grid strides over (batch, tile row, tile column).
#include "common.cuh"

namespace cubed {

constexpr int kTileM = 64, kTileN = 64, kTileK = 16, kThreadTile = 4;

template <class T>
__global__ void __launch_bounds__(256) MatmulKernel(const __grid_constant__ CudaBuiltinArgs a) {
  typedef typename Num<T>::Wrap Acc;
  __shared__ Acc as[kTileK][kTileM];
  __shared__ Acc bs[kTileK][kTileN];
  const CudaTensorArg& ta = a.buffers[0];
  const CudaTensorArg& tb = a.buffers[1];
  const CudaTensorArg& tc = a.buffers[2];
  const u32 rank = tc.rank;
  if (rank < 2 || rank > CUBED_CUDA_MAX_RANK || blockDim.x != 256) return;
  const Buf<const T> pa = BufOf<const T>(ta);
  const Buf<const T> pb = BufOf<const T>(tb);
  const Buf<T> pc = BufOf<T>(tc);
  const u64 m = tc.shape[rank - 2], n = tc.shape[rank - 1], kdim = ta.shape[rank - 1];
  const u64 a_rs = ta.strides[rank - 2], a_cs = ta.strides[rank - 1];
  const u64 b_rs = tb.strides[rank - 2], b_cs = tb.strides[rank - 1];
  const u64 c_rs = tc.strides[rank - 2], c_cs = tc.strides[rank - 1];
  const u64 tiles_m = (m + kTileM - 1) / kTileM, tiles_n = (n + kTileN - 1) / kTileN;
  const u64 tiles = a.count * tiles_m * tiles_n;
  const u32 tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int tensors[3] = {0, 1, 2};
  for (u64 t = blockIdx.x; t < tiles; t += gridDim.x) {
    const u64 batch = t / (tiles_m * tiles_n);
    const u64 rest = t % (tiles_m * tiles_n);
    const u64 m0 = (rest / tiles_n) * kTileM, n0 = (rest % tiles_n) * kTileN;
    u64 off[3];
    Unravel<3>(a, tensors, 2, rank - 2, CUBED_CUDA_MAX_RANK, batch, off);
    Acc acc[kThreadTile][kThreadTile];
#pragma unroll
    for (int i = 0; i < kThreadTile; ++i) {
#pragma unroll
      for (int j = 0; j < kThreadTile; ++j) acc[i][j] = Acc(0);
    }
    for (u64 k0 = 0; k0 < kdim; k0 += kTileK) {
#pragma unroll
      for (int l = 0; l < 4; ++l) {
        const u32 e = threadIdx.x + 256u * l;
        // a: consecutive threads walk k (contiguous in a row-major a).
        const u32 ar = e / kTileK, ak = e % kTileK;
        const u64 gi = m0 + ar, gk = k0 + ak;
        as[ak][ar] = gi < m && gk < kdim
                         ? static_cast<Acc>(Load(pa, off[0] + gi * a_rs + gk * a_cs))
                         : Acc(0);
        // b: consecutive threads walk n.
        const u32 bk = e / kTileN, bc = e % kTileN;
        const u64 hk = k0 + bk, gj = n0 + bc;
        bs[bk][bc] = hk < kdim && gj < n
                         ? static_cast<Acc>(Load(pb, off[1] + hk * b_rs + gj * b_cs))
                         : Acc(0);
      }
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < kTileK; ++kk) {
        Acc ra[kThreadTile], rb[kThreadTile];
#pragma unroll
        for (int i = 0; i < kThreadTile; ++i) ra[i] = as[kk][ty + 16 * i];
#pragma unroll
        for (int j = 0; j < kThreadTile; ++j) rb[j] = bs[kk][tx + 16 * j];
#pragma unroll
        for (int i = 0; i < kThreadTile; ++i) {
#pragma unroll
          for (int j = 0; j < kThreadTile; ++j) acc[i][j] += ra[i] * rb[j];
        }
      }
      __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < kThreadTile; ++i) {
      const u64 gi = m0 + ty + 16 * i;
#pragma unroll
      for (int j = 0; j < kThreadTile; ++j) {
        const u64 gj = n0 + tx + 16 * j;
        if (gi < m && gj < n) Store(pc, off[2] + gi * c_rs + gj * c_cs, static_cast<T>(acc[i][j]));
      }
    }
  }
}

}  // namespace cubed
