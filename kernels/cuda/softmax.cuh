// Softmax along the last axis: buffer 0 the input, buffer 1 the output (same shape; may be the
// input's memory with the same layout). A warp or a block (CUBED_CUDA_GROUP_*) handles one row:
// the row maximum, then exp(x - max) written out and summed in f64, then scaled by 1 / sum, as
// the CPU kernel does (NaN or +inf in a row, or a row of -inf only, gives NaN).
#include "common.cuh"

namespace cubed {

template <class T>
struct MaxCombine {
  static __device__ T Combine(T a, T b) { return Max(a, b); }
  static __device__ T Shfl(T v, int m) { return ShflXor(v, m); }
};
struct SumCombine {
  static __device__ double Combine(double a, double b) { return a + b; }
  static __device__ double Shfl(double v, int m) { return ShflXor(v, m); }
};

template <class T>
__global__ void __launch_bounds__(1024) SoftmaxKernel(const __grid_constant__ CudaBuiltinArgs a) {
  const Buf<const T> x = BufOf<const T>(a.buffers[0]);
  const Buf<T> y = BufOf<T>(a.buffers[1]);
  const u32 rank = a.buffers[1].rank;
  if (rank == 0 || rank > CUBED_CUDA_MAX_RANK) return;
  const u32 last = rank - 1;
  const u64 len = a.buffers[1].shape[last];
  const u64 sx = a.buffers[0].strides[last], sy = a.buffers[1].strides[last];
  const Group g = GroupOf(a.variant);
  const int tensors[2] = {0, 1};
  for (u64 r = static_cast<u64>(blockIdx.x) * g.per_block + g.index; r < a.count;
       r += static_cast<u64>(gridDim.x) * g.per_block) {
    u64 off[2];
    Unravel<2>(a, tensors, 1, rank, last, r, off);
    T m = Num<T>::Lowest();
    u64 k = g.lane;
    for (; k + 3 * g.size < len; k += 4 * g.size) {  // Four loads in flight.
      T v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) v[u] = Load(x, off[0] + (k + u * g.size) * sx);
      m = Max(Max(m, Max(v[0], v[1])), Max(v[2], v[3]));
    }
    for (; k < len; k += g.size) m = Max(m, Load(x, off[0] + k * sx));
    m = GroupAllReduce<MaxCombine<T>>(m, a.variant);
    double sum = 0.0;
    for (k = g.lane; k < len; k += g.size) {
      const T e = Exp(Load(x, off[0] + k * sx) - m);
      Store(y, off[1] + k * sy, e);
      sum += static_cast<double>(e);
    }
    sum = GroupAllReduce<SumCombine>(sum, a.variant);
    const T inv = Convert<T>(1.0 / sum);
    // Each thread rescales exactly the elements it wrote above.
    for (k = g.lane; k < len; k += g.size) {
      const u64 i = off[1] + k * sy;
      Store(y, i, Load(Buf<const T>{y.p, y.n}, i) * inv);
    }
  }
}

}  // namespace cubed
