// Shared device code of the builtin CUDA kernels: scalar semantics identical to the CPU library
// (kernels/cpu/scalar_ops.h, kernels/cpu/convert.h, docs/kernel-abi.md), checked buffer access and
// strided indexing. Compiled by NVRTC only; includes nothing from the CUDA toolkit.
#ifndef CUBED_KERNELS_CUDA_COMMON_CUH_
#define CUBED_KERNELS_CUDA_COMMON_CUH_

#include "builtin_args.h"

namespace cubed {

typedef unsigned long long u64;
typedef long long i64;
typedef unsigned int u32;

template <class A, class B>
struct Same {
  static constexpr bool value = false;
};
template <class A>
struct Same<A, A> {
  static constexpr bool value = true;
};

// Per-type properties. `Wrap` is the type integer arithmetic runs in (unsigned: wraps, no UB);
// `Sum` is the accumulator of sum and matmul-free reductions (f32 sums in f64).
template <class T>
struct Num;
template <>
struct Num<float> {
  static constexpr bool kFloat = true;
  typedef float Wrap;
  typedef double Sum;
  static __device__ float Lowest() { return __int_as_float(0xff800000); }   // -inf
  static __device__ float Highest() { return __int_as_float(0x7f800000); }  // +inf
  static __device__ float NaN() { return __int_as_float(0x7fc00000); }
};
template <>
struct Num<double> {
  static constexpr bool kFloat = true;
  typedef double Wrap;
  typedef double Sum;
  static __device__ double Lowest() { return __longlong_as_double(0xfff0000000000000ll); }
  static __device__ double Highest() { return __longlong_as_double(0x7ff0000000000000ll); }
  static __device__ double NaN() { return __longlong_as_double(0x7ff8000000000000ll); }
};
template <>
struct Num<int> {
  static constexpr bool kFloat = false;
  static constexpr bool kSigned = true;
  typedef unsigned int Wrap;
  typedef unsigned int Sum;
  static __device__ int Lowest() { return -2147483647 - 1; }
  static __device__ int Highest() { return 2147483647; }
};
template <>
struct Num<unsigned int> {
  static constexpr bool kFloat = false;
  static constexpr bool kSigned = false;
  typedef unsigned int Wrap;
  typedef unsigned int Sum;
  static __device__ unsigned int Lowest() { return 0u; }
  static __device__ unsigned int Highest() { return 0xffffffffu; }
};
template <>
struct Num<long long> {
  static constexpr bool kFloat = false;
  static constexpr bool kSigned = true;
  typedef unsigned long long Wrap;
  typedef unsigned long long Sum;
  static __device__ long long Lowest() { return -9223372036854775807ll - 1; }
  static __device__ long long Highest() { return 9223372036854775807ll; }
};
template <>
struct Num<unsigned long long> {
  static constexpr bool kFloat = false;
  static constexpr bool kSigned = false;
  typedef unsigned long long Wrap;
  typedef unsigned long long Sum;
  static __device__ unsigned long long Lowest() { return 0ull; }
  static __device__ unsigned long long Highest() { return ~0ull; }
};

template <class T>
__device__ __forceinline__ bool IsNan(T x) {
  if constexpr (Num<T>::kFloat) {
    return x != x;
  } else {
    return false;
  }
}

// Math on the type's own precision (the CUDA math library, built into NVRTC).
__device__ __forceinline__ float Exp(float x) { return expf(x); }
__device__ __forceinline__ double Exp(double x) { return exp(x); }
__device__ __forceinline__ float Log(float x) { return logf(x); }
__device__ __forceinline__ double Log(double x) { return log(x); }
__device__ __forceinline__ float Sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double Sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float Tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double Tanh(double x) { return tanh(x); }
__device__ __forceinline__ float Pow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double Pow(double x, double y) { return pow(x, y); }
__device__ __forceinline__ float Fabs(float x) { return fabsf(x); }
__device__ __forceinline__ double Fabs(double x) { return fabs(x); }

// kernels/cpu/convert.h: static_cast where defined; float -> integer truncates, NaN gives 0 and
// out-of-range values saturate; f64 -> f32 overflows to +-inf; integer -> integer wraps.
template <class To, class From>
__device__ __forceinline__ To Convert(From x) {
  if constexpr (Num<From>::kFloat && !Num<To>::kFloat) {
    if (x != x) return To(0);
    const double d = static_cast<double>(x);
    const double upper = static_cast<double>(Num<To>::Highest()) + 1.0;
    const double lower = static_cast<double>(Num<To>::Lowest()) - 1.0;
    if (d >= upper) return Num<To>::Highest();
    if (d <= lower) return Num<To>::Lowest();
    return static_cast<To>(x);
  } else if constexpr (Same<From, double>::value && Same<To, float>::value) {
    const double kOverflow = 340282356779733661637539395458142568448.0;  // 2^128 - 2^103
    if (x >= kOverflow) return Num<float>::Highest();
    if (x <= -kOverflow) return Num<float>::Lowest();
    return static_cast<float>(x);
  } else {
    return static_cast<To>(x);
  }
}

// kernels/cpu/scalar_ops.h: integers wrap, x / 0 = 0, MIN / -1 = MIN, float max/min propagate NaN.
template <class T>
__device__ __forceinline__ T Neg(T x) {
  if constexpr (Num<T>::kFloat) {
    return -x;
  } else {
    typedef typename Num<T>::Wrap W;
    return static_cast<T>(W(0) - static_cast<W>(x));
  }
}
template <class T>
__device__ __forceinline__ T Abs(T x) {
  if constexpr (Num<T>::kFloat) {
    return Fabs(x);
  } else {
    return x < T(0) ? Neg(x) : x;
  }
}
template <class T>
__device__ __forceinline__ T Add(T a, T b) {
  typedef typename Num<T>::Wrap W;
  return static_cast<T>(static_cast<W>(a) + static_cast<W>(b));
}
template <class T>
__device__ __forceinline__ T Sub(T a, T b) {
  typedef typename Num<T>::Wrap W;
  return static_cast<T>(static_cast<W>(a) - static_cast<W>(b));
}
template <class T>
__device__ __forceinline__ T Mul(T a, T b) {
  typedef typename Num<T>::Wrap W;
  return static_cast<T>(static_cast<W>(a) * static_cast<W>(b));
}
template <class T>
__device__ __forceinline__ T Div(T a, T b) {
  if constexpr (!Num<T>::kFloat) {
    if (b == T(0)) return T(0);
    if constexpr (Num<T>::kSigned) {
      if (a == Num<T>::Lowest() && b == T(-1)) return a;
    }
  }
  return a / b;
}
template <class T>
__device__ __forceinline__ T Max(T a, T b) {
  if constexpr (Num<T>::kFloat) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return a < b ? b : a;
}
template <class T>
__device__ __forceinline__ T Min(T a, T b) {
  if constexpr (Num<T>::kFloat) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return b < a ? b : a;
}

// Thread coordinates of a grid-stride loop, 64-bit.
__device__ __forceinline__ u64 GlobalThread() {
  return static_cast<u64>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ u64 GridThreads() { return static_cast<u64>(gridDim.x) * blockDim.x; }

// A buffer as `T`: its base and the number of whole elements bound. Every access is checked
// (validation on the host already guarantees it; this is defence in depth): an out-of-bounds
// load reads 0 and an out-of-bounds store is dropped.
template <class T>
struct Buf {
  T* p;
  u64 n;
};
template <class T>
__device__ __forceinline__ Buf<T> BufOf(const CudaTensorArg& t) {
  Buf<T> b;
  b.p = reinterpret_cast<T*>(t.ptr);
  b.n = t.bytes / sizeof(T);
  return b;
}
template <class T>
__device__ __forceinline__ T Load(const Buf<T>& b, u64 i) {
  return i < b.n ? b.p[i] : T(0);
}
template <class T>
__device__ __forceinline__ void Store(const Buf<T>& b, u64 i, T v) {
  if (i < b.n) b.p[i] = v;
}

// N elements moved by one vector load or store.
template <class T, int N>
struct __align__(sizeof(T) * N) Pack {
  T v[N];
};
template <class T>
__device__ __forceinline__ bool Aligned(const T* p, u64 bytes) {
  return reinterpret_cast<u64>(p) % bytes == 0;
}

// Element offsets, in K tensors, of the row-major index `linear` over `shape` (dims [0, rank)
// of tensor `shape_of`), skipping dim `skip` (pass CUBED_CUDA_MAX_RANK for none).
template <int K>
__device__ __forceinline__ void Unravel(const CudaBuiltinArgs& a, const int (&tensors)[K],
                                        int shape_of, u32 rank, u32 skip, u64 linear,
                                        u64 (&off)[K]) {
#pragma unroll
  for (int k = 0; k < K; ++k) off[k] = 0;
#pragma unroll
  for (int d = CUBED_CUDA_MAX_RANK - 1; d >= 0; --d) {
    if (static_cast<u32>(d) < rank && static_cast<u32>(d) != skip) {
      const u64 extent = a.buffers[shape_of].shape[d];
      u64 c;
      if (linear <= 0xffffffffull && extent <= 0xffffffffull) {
        const u32 l32 = static_cast<u32>(linear), e32 = static_cast<u32>(extent);
        c = l32 % e32;
        linear = l32 / e32;
      } else {
        c = linear % extent;
        linear /= extent;
      }
#pragma unroll
      for (int k = 0; k < K; ++k) off[k] += c * a.buffers[tensors[k]].strides[d];
    }
  }
}

// XOR-butterfly lane exchange of the scalar types.
#define CUBED_SHFL_XOR(T) \
  __device__ __forceinline__ T ShflXor(T v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
CUBED_SHFL_XOR(float)
CUBED_SHFL_XOR(double)
CUBED_SHFL_XOR(int)
CUBED_SHFL_XOR(unsigned int)
CUBED_SHFL_XOR(long long)
CUBED_SHFL_XOR(unsigned long long)
#undef CUBED_SHFL_XOR

// Combines one value per thread over a warp or over the whole block (blockDim.x a multiple of
// 32, at most 1024) and returns the result to every thread of that group. `Op::Combine(a, b)`
// must be associative and commutative (equal results on every lane); `Op::Shfl(v, m)` exchanges
// a value with lane ^ m. Every thread of the group must call it (uniform control flow).
template <class Op, class V>
__device__ __forceinline__ V WarpAllReduce(V v) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v = Op::Combine(v, Op::Shfl(v, m));
  return v;
}
template <class Op, class V>
__device__ V BlockAllReduce(V v) {
  __shared__ __align__(16) unsigned char raw[32 * sizeof(V)];
  V* partial = reinterpret_cast<V*>(raw);
  const u32 lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const u32 warps = blockDim.x >> 5;
  v = WarpAllReduce<Op>(v);
  __syncthreads();  // A previous call may still be reading `partial`.
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = partial[0];
  for (u32 w = 1; w < warps; ++w) v = Op::Combine(v, partial[w]);
  return v;
}

// Reduces over the group a `variant` (CUBED_CUDA_GROUP_*) assigns to one output.
template <class Op, class V>
__device__ __forceinline__ V GroupAllReduce(V v, u32 variant) {
  if (variant == CUBED_CUDA_GROUP_BLOCK) return BlockAllReduce<Op>(v);
  if (variant == CUBED_CUDA_GROUP_WARP) return WarpAllReduce<Op>(v);
  return v;
}

// Threads per group, this thread's lane in its group, groups per block and this thread's group.
struct Group {
  u32 size, lane, per_block, index;
};
__device__ __forceinline__ Group GroupOf(u32 variant) {
  Group g;
  g.size = variant == CUBED_CUDA_GROUP_BLOCK ? blockDim.x
                                             : (variant == CUBED_CUDA_GROUP_WARP ? 32u : 1u);
  g.lane = threadIdx.x % g.size;
  g.per_block = blockDim.x / g.size;
  g.index = threadIdx.x / g.size;
  return g;
}

}  // namespace cubed

#endif  // CUBED_KERNELS_CUDA_COMMON_CUH_
