// Reductions along one axis: sum, max, min, mean, argmax. Buffer 0 is the input, buffer 1 the
// output (the input's shape with shape[axis] == 1; argmax writes i64). A group of threads (a
// block, a warp or one thread: CUBED_CUDA_GROUP_*) computes one output at a time, each thread
// folding a strided part of the axis (16-byte vectors where the axis is contiguous), then the
// group combines the partial results. With few outputs, several blocks share each output
// (Note [Split reduction] in builtin_args.h).
#include "common.cuh"

namespace cubed {

// A reducer: Acc Init(); Acc Step(Acc, T x, u64 k) (element k of the axis, k greater than the
// index of every element already in the Acc: FoldSlice folds each accumulator in order);
// Acc Combine(Acc, Acc) (associative and commutative); Acc Shfl(Acc, int lane_mask);
// Out Finish(Acc, u64 n).
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

// f16 and bf16 means accumulate in f32, as their sums do; f32 and f64 in f64.
template <class T>
struct MeanR {
  typedef typename Pick<Num<T>::kHalf, float, double>::type Acc;
  typedef T Out;
  static __device__ Acc Init() { return Acc(0); }
  static __device__ Acc Step(Acc acc, T x, u64) { return acc + static_cast<Acc>(x); }
  static __device__ Acc Combine(Acc a, Acc b) { return a + b; }
  static __device__ Acc Shfl(Acc v, int m) { return ShflXor(v, m); }
  static __device__ Out Finish(Acc acc, u64 n) {
    return n == 0 ? Num<T>::NaN() : Convert<T>(acc / static_cast<Acc>(n));
  }
};

// Max and min hold values in Num<T>::Wide (exact: f16/bf16 in float, 8/16-bit integers and bool
// in 32 bits), so partials are whole words and lanes shuffle native types.
template <class T>
struct MaxR {
  typedef typename Num<T>::Wide Acc;
  typedef T Out;
  static __device__ Acc Init() { return static_cast<Acc>(Num<T>::Lowest()); }
  static __device__ Acc Step(Acc acc, T x, u64) { return Max(acc, static_cast<Acc>(x)); }
  static __device__ Acc Combine(Acc a, Acc b) { return Max(a, b); }
  static __device__ Acc Shfl(Acc v, int m) { return ShflXor(v, m); }
  static __device__ Out Finish(Acc acc, u64) { return static_cast<T>(acc); }
};

template <class T>
struct MinR {
  typedef typename Num<T>::Wide Acc;
  typedef T Out;
  static __device__ Acc Init() { return static_cast<Acc>(Num<T>::Highest()); }
  static __device__ Acc Step(Acc acc, T x, u64) { return Min(acc, static_cast<Acc>(x)); }
  static __device__ Acc Combine(Acc a, Acc b) { return Min(a, b); }
  static __device__ Acc Shfl(Acc v, int m) { return ShflXor(v, m); }
  static __device__ Out Finish(Acc acc, u64) { return static_cast<T>(acc); }
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
  typedef typename Num<T>::Wide W;
  typedef ArgmaxAcc<W> Acc;
  typedef long long Out;
  static __device__ Acc Init() { return Acc{static_cast<W>(Num<T>::Lowest()), ~0ull}; }
  // Selects, not branches (see Max in common.cuh): b wins when it alone is NaN, or is greater,
  // or ties (equal, or both NaN) with a smaller index.
  static __device__ Acc Combine(Acc a, Acc b) {
    const bool an = IsNan(a.best), bn = IsNan(b.best);
    const bool greater = (bn & !an) | (!an & !bn & (b.best > a.best));
    const bool tie = (an & bn) | (a.best == b.best);
    return greater | (tie & (b.index < a.index)) ? b : a;
  }
  // k follows every index folded into acc, so a tie keeps acc unless acc is Init's.
  static __device__ Acc Step(Acc acc, T x, u64 k) {
    const W v = static_cast<W>(x);
    const bool take =
        !IsNan(acc.best) & (IsNan(v) | (v > acc.best) | ((v == acc.best) & (acc.index == ~0ull)));
    return take ? Acc{v, k} : acc;
  }
  static __device__ Acc Shfl(Acc v, int m) { return Acc{ShflXor(v.best, m), ShflXor(v.index, m)}; }
  static __device__ Out Finish(Acc acc, u64) {
    return acc.index == ~0ull ? 0ll : static_cast<long long>(acc.index);
  }
};

// This thread's share of elements [begin, end) of one output's axis, element k at
// x[base + k * stride], folded into `acc`: lanes take interleaved 16-byte vectors when the axis
// is contiguous, else interleaved elements, kInFlight loads in flight (a warp streaming a long
// row, or a thread a long column, needs that many to cover the memory's latency: GPU run 36).
constexpr int kInFlight = 8;
template <class Red, class T>
__device__ __forceinline__ typename Red::Acc FoldSlice(typename Red::Acc acc, const Buf<const T>& x,
                                                       u64 base, u64 stride, u64 begin, u64 end,
                                                       const Group& g) {
  constexpr u32 kV = 16 / sizeof(T);
  if (stride == 1 && g.size > 1 && begin < end && base + end <= x.n) {
    const T* p = x.p + base;
    const u64 misfit = (16 - reinterpret_cast<u64>(p + begin) % 16) % 16 / sizeof(T);
    const u64 head = misfit < end - begin ? misfit : end - begin;
    if (g.lane < head) acc = Red::Step(acc, p[begin + g.lane], begin + g.lane);
    const u64 first = begin + head;
    const u64 packs = (end - first) / kV;
    const Pack<T, kV>* v = reinterpret_cast<const Pack<T, kV>*>(p + first);
    u64 j = g.lane;
    for (; j + (kInFlight - 1) * g.size < packs; j += kInFlight * g.size) {
      Pack<T, kV> q[kInFlight];
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) q[u] = v[j + u * g.size];
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
#pragma unroll
        for (u32 e = 0; e < kV; ++e)
          acc = Red::Step(acc, q[u].v[e], first + (j + u * g.size) * kV + e);
      }
    }
    for (; j < packs; j += g.size) {
      const Pack<T, kV> q = v[j];
#pragma unroll
      for (u32 e = 0; e < kV; ++e) acc = Red::Step(acc, q.v[e], first + j * kV + e);
    }
    for (u64 k = first + packs * kV + g.lane; k < end; k += g.size) acc = Red::Step(acc, p[k], k);
    return acc;
  }
  typedef typename Red::Acc Acc;
  if (g.size == 1 && sizeof(Acc) <= 4 && end - begin >= 2 * kInFlight) {
    // Note [Chained columns]: a thread folding a column alone keeps kChains accumulators, each
    // over a contiguous part of [begin, end), so that successive steps do not all wait on each
    // other (a max step is a compare, two NaN tests and a select). The parts are combined in
    // order, so the first of equal values (-0 before +0, the first NaN) still wins. Each chain
    // takes kInFlight / kChains consecutive rows a step: kInFlight loads in flight, and few
    // enough accumulators and pointers to stay within the 64 registers of 1024 threads (8-byte
    // accumulators, f32 means for one, spill: they keep the single chain). Measured (GPU run 54,
    // axis 0 of 4096 x 16384 f32): max/min 2780 -> 2838 GB/s (0.74 -> 0.75x of torch), sum
    // unchanged: the chain was a small part; what bounds axis 0 is not found yet. The same for
    // the vectorized path (element e of each pack into accumulator e % 4, run 57): full max and
    // argmax of 64M unchanged (0.71x, 0.69x), sum 0.83 -> 0.79x: not kept.
    constexpr int kChains = 4, kRows = kInFlight / kChains;
    const u64 part = (end - begin) / kChains / kRows * kRows;
    Acc chains[kChains];
#pragma unroll
    for (int u = 0; u < kChains; ++u) chains[u] = Red::Init();
    for (u64 i = 0; i < part; i += kRows) {
      T v[kChains][kRows];
#pragma unroll
      for (int u = 0; u < kChains; ++u) {
#pragma unroll
        for (int r = 0; r < kRows; ++r)
          v[u][r] = Load(x, base + (begin + u * part + i + r) * stride);
      }
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
#pragma unroll
        for (int u = 0; u < kChains; ++u) {
          chains[u] = Red::Step(chains[u], v[u][r], begin + u * part + i + r);
        }
      }
    }
    // The rows after the last part's follow it directly: they extend the last chain.
    for (u64 k = begin + kChains * part; k < end; ++k) {
      chains[kChains - 1] = Red::Step(chains[kChains - 1], Load(x, base + k * stride), k);
    }
#pragma unroll
    for (int u = 0; u < kChains; ++u) acc = Red::Combine(acc, chains[u]);
    return acc;
  }
  u64 k = begin + g.lane;
  for (; k + (kInFlight - 1) * g.size < end; k += kInFlight * g.size) {
    T v[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) v[u] = Load(x, base + (k + u * g.size) * stride);
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) acc = Red::Step(acc, v[u], k + u * g.size);
  }
  for (; k < end; k += g.size) acc = Red::Step(acc, Load(x, base + k * stride), k);
  return acc;
}

// A value another block wrote in this kernel, read from L2 (the SM's L1 may hold a stale line).
template <class V>
__device__ __forceinline__ V LoadFromL2(const V* p) {
  static_assert(sizeof(V) % 4 == 0, "partials are whole words");
  V v;
  unsigned int* d = reinterpret_cast<unsigned int*>(&v);
  const unsigned int* s = reinterpret_cast<const unsigned int*>(p);
#pragma unroll
  for (u32 i = 0; i < sizeof(V) / 4; ++i) d[i] = __ldcg(s + i);
  return v;
}

// Publishes (see Note [Split reduction] in builtin_args.h) this block's partial `acc` for output
// `o` (slice `s` of output group `group`) and returns true, with `acc` every slice's partials
// combined in slice order, in the block that completes the group; false in the others. Called by
// every thread of the block; `active` is uniform in each output's group of threads.
template <class Red>
__device__ bool CombineSplits(const CudaBuiltinArgs& a, u64 group, u64 s, u64 splits, u64 o,
                              bool active, const Group& g, typename Red::Acc& acc) {
  typedef typename Red::Acc Acc;
  static_assert(sizeof(Acc) <= CUBED_CUDA_SPLIT_PARTIAL_BYTES, "partial too large");
  __shared__ bool last;
  unsigned int* counters = reinterpret_cast<unsigned int*>(a.workspace);
  Acc* partials = reinterpret_cast<Acc*>(a.workspace + CUBED_CUDA_SPLIT_PARTIALS_OFFSET);
  if (active && g.lane == 0) partials[s * a.count + o] = acc;
  __threadfence();  // The partial is visible device-wide before the counter moves.
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(&counters[group], 1u) == splits - 1;
    if (last) counters[group] = 0u;  // Every slice arrived: zero again for the next launch.
  }
  __syncthreads();
  if (!last) return false;
  __threadfence();
  if (active) {
    // kInFlight partials loaded before any is combined: one L2 round trip per kInFlight slices,
    // not per slice (a thread per output combines every slice alone, at the kernel's tail).
    acc = Red::Init();
    for (u64 j = g.lane; j < splits; j += kInFlight * g.size) {
      Acc part[kInFlight];
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        const u64 k = j + u * g.size;
        part[u] = k < splits ? LoadFromL2(&partials[k * a.count + o]) : Red::Init();
      }
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) acc = Red::Combine(acc, part[u]);
    }
    acc = GroupAllReduce<Red>(acc, a.variant);
  }
  return true;
}

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
  const u64 groups = (a.count + g.per_block - 1) / g.per_block;
  const bool split = a.splits > 1 && a.workspace != 0 && groups <= CUBED_CUDA_SPLIT_GROUPS;
  const u64 splits = split ? a.splits : 1;
  // Slices are whole multiples of 16 elements, so that every slice's vectors stay aligned.
  const u64 chunk = split ? ((len + splits - 1) / splits + 15) / 16 * 16 : len;
  // Every thread of a block runs the same iterations (uniform for barriers and collectives).
  for (u64 w = blockIdx.x; w < groups * splits; w += gridDim.x) {
    const u64 group = w / splits, s = w % splits;
    const u64 o = group * g.per_block + g.index;
    const bool active = o < a.count;
    u64 off[2] = {0, 0};
    if (active) Unravel<2>(a, tensors, 1, rank, axis, o, off);
    const u64 begin = s * chunk < len ? s * chunk : len;
    const u64 end = len - begin < chunk ? len : begin + chunk;
    Acc acc = Red::Init();
    if (active) {
      acc = FoldSlice<Red>(acc, x, off[0], axis_stride, begin, end, g);
      acc = GroupAllReduce<Red>(acc, a.variant);
    }
    if (split && !CombineSplits<Red>(a, group, s, splits, o, active, g, acc)) continue;
    if (active && g.lane == 0) Store(y, off[1], Red::Finish(acc, len));
  }
}

}  // namespace cubed
