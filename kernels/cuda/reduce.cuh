// Reductions along one axis: sum, max, min, mean, argmax. Buffer 0 is the input, buffer 1 the
// output (the input's shape with shape[axis] == 1; argmax writes i64). A group of threads (a
// block, a warp or one thread: CUBED_CUDA_GROUP_*) computes one output at a time, each thread
// folding a strided part of the axis, then the group combines the partial results.
#include "common.cuh"

namespace cubed {

// A reducer: Acc Init(); Acc Step(Acc, T x, u64 k); Acc Combine(Acc, Acc) (associative and
// commutative); Acc Shfl(Acc, int lane_mask); Out Finish(Acc, u64 n).
template <class T>
struct SumR {
  typedef typename Num<T>::Sum Acc;
  typedef T Out;
  static __device__ Acc Init() { return Acc(0); }
  static __device__ Acc Step(Acc acc, T x, u64) { return acc + static_cast<Acc>(x); }
  static __device__ Acc Combine(Acc a, Acc b) { return a + b; }
  static __device__ Acc Shfl(Acc v, int m) { return ShflXor(v, m); }
  static __device__ Out Finish(Acc acc, u64) { return Convert<T>(acc); }
};

template <class T>
struct MeanR {
  typedef double Acc;
  typedef T Out;
  static __device__ Acc Init() { return 0.0; }
  static __device__ Acc Step(Acc acc, T x, u64) { return acc + static_cast<double>(x); }
  static __device__ Acc Combine(Acc a, Acc b) { return a + b; }
  static __device__ Acc Shfl(Acc v, int m) { return ShflXor(v, m); }
  static __device__ Out Finish(Acc acc, u64 n) {
    return n == 0 ? Num<T>::NaN() : Convert<T>(acc / static_cast<double>(n));
  }
};

template <class T>
struct MaxR {
  typedef T Acc;
  typedef T Out;
  static __device__ Acc Init() { return Num<T>::Lowest(); }
  static __device__ Acc Step(Acc acc, T x, u64) { return Max(acc, x); }
  static __device__ Acc Combine(Acc a, Acc b) { return Max(a, b); }
  static __device__ Acc Shfl(Acc v, int m) { return ShflXor(v, m); }
  static __device__ Out Finish(Acc acc, u64) { return acc; }
};

template <class T>
struct MinR {
  typedef T Acc;
  typedef T Out;
  static __device__ Acc Init() { return Num<T>::Highest(); }
  static __device__ Acc Step(Acc acc, T x, u64) { return Min(acc, x); }
  static __device__ Acc Combine(Acc a, Acc b) { return Min(a, b); }
  static __device__ Acc Shfl(Acc v, int m) { return ShflXor(v, m); }
  static __device__ Out Finish(Acc acc, u64) { return acc; }
};

// Index of the first maximum, or of the first NaN when there is one: the candidate that is
// greater in the order "numbers < NaN", ties going to the smaller index.
template <class T>
struct ArgmaxAcc {
  T best;
  u64 index;
};
template <class T>
struct ArgmaxR {
  typedef ArgmaxAcc<T> Acc;
  typedef long long Out;
  static __device__ Acc Init() { return Acc{Num<T>::Lowest(), ~0ull}; }
  static __device__ Acc Combine(Acc a, Acc b) {
    const bool an = IsNan(a.best), bn = IsNan(b.best);
    if (an != bn) return an ? a : b;
    if (!an && a.best != b.best) return a.best > b.best ? a : b;
    return a.index <= b.index ? a : b;
  }
  static __device__ Acc Step(Acc acc, T x, u64 k) { return Combine(acc, Acc{x, k}); }
  static __device__ Acc Shfl(Acc v, int m) { return Acc{ShflXor(v.best, m), ShflXor(v.index, m)}; }
  static __device__ Out Finish(Acc acc, u64) {
    return acc.index == ~0ull ? 0ll : static_cast<long long>(acc.index);
  }
};

template <template <class> class R, class T>
__global__ void __launch_bounds__(1024) ReduceKernel(const __grid_constant__ CudaBuiltinArgs a) {
  typedef R<T> Red;
  typedef typename Red::Acc Acc;
  typedef typename Red::Out Out;
  const Buf<const T> x = BufOf<const T>(a.buffers[0]);
  const Buf<Out> y = BufOf<Out>(a.buffers[1]);
  const u32 axis = a.axis < CUBED_CUDA_MAX_RANK ? a.axis : 0;
  const u64 len = a.buffers[0].shape[axis];
  const u64 axis_stride = a.buffers[0].strides[axis];
  const u32 rank = a.buffers[1].rank;
  const Group g = GroupOf(a.variant);
  const int tensors[2] = {0, 1};
  // Every thread of a group runs the same iterations (uniform for the group's collectives).
  for (u64 o = static_cast<u64>(blockIdx.x) * g.per_block + g.index; o < a.count;
       o += static_cast<u64>(gridDim.x) * g.per_block) {
    u64 off[2];
    Unravel<2>(a, tensors, 1, rank, axis, o, off);
    Acc acc = Red::Init();
    u64 k = g.lane;
    // Four independent loads in flight per thread, then the rest one by one.
    for (; k + 3 * g.size < len; k += 4 * g.size) {
      T v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) v[u] = Load(x, off[0] + (k + u * g.size) * axis_stride);
#pragma unroll
      for (int u = 0; u < 4; ++u) acc = Red::Step(acc, v[u], k + u * g.size);
    }
    for (; k < len; k += g.size) acc = Red::Step(acc, Load(x, off[0] + k * axis_stride), k);
    acc = GroupAllReduce<Red>(acc, a.variant);
    if (g.lane == 0) Store(y, off[1], Red::Finish(acc, len));
  }
}

}  // namespace cubed
