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

// 16-bit floats and the 8-bit bool (common/half.h is the host twin): stored bits, arithmetic
// through the implicit conversion to float, one rounding to nearest even on store (from float,
// double or an integer, subnormals included; overflow gives +-inf). Bool8 reads any non-zero byte
// as true and stores 0 or 1.
template <int kMant, int kBias>
__device__ __forceinline__ unsigned short RoundToHalfBits(bool neg, u64 sig, int exp2) {
  const unsigned short sign = neg ? 0x8000 : 0;
  const u64 inf = static_cast<u64>(2 * kBias + 1) << kMant;
  const int top = 63 - __clzll(static_cast<long long>(sig));
  const int e = top + exp2;
  if (e > kBias) return sign | static_cast<unsigned short>(inf);
  const int keep_from = (e >= 1 - kBias ? e - kMant : 1 - kBias - kMant) - exp2;
  u64 q;
  if (keep_from <= 0) {
    q = sig << -keep_from;
  } else if (keep_from > 64) {
    q = 0;
  } else {
    const u64 rest = keep_from == 64 ? sig : sig & ((1ull << keep_from) - 1);
    const u64 half = 1ull << (keep_from - 1);
    q = keep_from == 64 ? 0 : sig >> keep_from;
    if (rest > half || (rest == half && (q & 1) != 0)) ++q;
  }
  const u64 bits = e >= 1 - kBias ? (static_cast<u64>(e + kBias - 1) << kMant) + q : q;
  return bits >= inf ? (sign | static_cast<unsigned short>(inf))
                     : static_cast<unsigned short>(sign | bits);
}
template <int kMant, int kBias>
__device__ __forceinline__ unsigned short DoubleToHalfBits(double d) {
  const u64 u = static_cast<u64>(__double_as_longlong(d));
  const bool neg = (u >> 63) != 0;
  const int ex = static_cast<int>((u >> 52) & 0x7ff);
  const u64 man = u & ((1ull << 52) - 1);
  const unsigned short inf = static_cast<unsigned short>((2 * kBias + 1) << kMant);
  if (ex == 0x7ff) {
    return (neg ? 0x8000 : 0) | (man != 0 ? (inf | (1u << (kMant - 1))) : inf);
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // sm_90 converts f64 to f16 and bf16 in one instruction (F2F), rounding the same way; NaN and
  // infinity keep the path above, as the host (GPU run 58: f64 -> f16 at 0.80x of torch).
  unsigned short h;
  if constexpr (kMant == 10) {
    asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h) : "d"(d));
  } else {
    asm("cvt.rn.bf16.f64 %0, %1;" : "=h"(h) : "d"(d));
  }
  return h;
#else
  if (ex == 0 && man == 0) return neg ? 0x8000 : 0;
  if (ex == 0) return RoundToHalfBits<kMant, kBias>(neg, man, -1074);
  return RoundToHalfBits<kMant, kBias>(neg, man | (1ull << 52), ex - 1075);
#endif
}
__device__ __forceinline__ unsigned short FloatToF16Bits(float x) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
  if (x != x) h = (__float_as_uint(x) >> 16 & 0x8000u) | 0x7e00u;  // Keep the sign, as the host.
  return h;
}
__device__ __forceinline__ float F16BitsToFloat(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ unsigned short FloatToBf16Bits(float x) {
  const u32 u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<unsigned short>((u >> 16) | 0x40u);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  // One instruction (sm_80 and later), the same round-to-nearest-even as the line below; NaN
  // keeps the sign and payload's top bits above, as the host does.
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return h;
#else
  return static_cast<unsigned short>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
#endif
}

// An integer as f16 or bf16 bits, rounded once to nearest even by rounding the integer itself.
template <int kMant, int kBias, bool kSigned, class I>
__device__ __forceinline__ unsigned short IntToHalfBitsExactly(I i) {
  if (i == I(0)) return 0;
  if constexpr (kSigned) {
    const long long v = static_cast<long long>(i);
    const bool neg = v < 0;
    const u64 mag = neg ? 0ull - static_cast<u64>(v) : static_cast<u64>(v);
    return RoundToHalfBits<kMant, kBias>(neg, mag, 0);
  } else {
    return RoundToHalfBits<kMant, kBias>(false, static_cast<u64>(i), 0);
  }
}
// An integer as f16 (kMant 10) or bf16 (kMant 7) bits, rounded once to nearest even. Through
// float where float is exact or its rounding cannot change the result: every 8- and 16-bit
// integer is exact in float; for f16 so is every |i| < 2^24, and any larger one is infinity
// either way (f16's largest finite value is 65504). bf16 from 32- and 64-bit integers: one
// instruction on sm_90, else IntToHalfBitsExactly (float would round twice). GPU run 58: the
// software rounding (~30 instructions) held i8 -> f16 to a third of the copy bandwidth.
template <int kMant, int kBias, bool kSigned, class I>
__device__ __forceinline__ unsigned short IntToHalfBits(I i) {
  if constexpr (sizeof(I) <= 2 || kMant == 10) {
    const float f = static_cast<float>(i);
    if constexpr (kMant == 10) {
      unsigned short h;
      asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
      return h;
    } else {
      return FloatToBf16Bits(f);
    }
  } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    unsigned short h;
    if constexpr (kSigned && sizeof(I) == 4) {
      asm("cvt.rn.bf16.s32 %0, %1;" : "=h"(h) : "r"(static_cast<int>(i)));
    } else if constexpr (sizeof(I) == 4) {
      asm("cvt.rn.bf16.u32 %0, %1;" : "=h"(h) : "r"(static_cast<unsigned int>(i)));
    } else if constexpr (kSigned) {
      asm("cvt.rn.bf16.s64 %0, %1;" : "=h"(h) : "l"(static_cast<long long>(i)));
    } else {
      asm("cvt.rn.bf16.u64 %0, %1;" : "=h"(h) : "l"(static_cast<unsigned long long>(i)));
    }
    return h;
#else
    return IntToHalfBitsExactly<kMant, kBias, kSigned>(i);
#endif
  }
}

#define CUBED_HALF_INT_CTORS(Name, kMant, kBias)                                     \
  __device__ Name(bool i) : bits(i ? Name(1.0f).bits : 0) {}                         \
  __device__ Name(signed char i) : bits(IntToHalfBits<kMant, kBias, true>(i)) {}     \
  __device__ Name(unsigned char i) : bits(IntToHalfBits<kMant, kBias, false>(i)) {}  \
  __device__ Name(short i) : bits(IntToHalfBits<kMant, kBias, true>(i)) {}           \
  __device__ Name(unsigned short i) : bits(IntToHalfBits<kMant, kBias, false>(i)) {} \
  __device__ Name(int i) : bits(IntToHalfBits<kMant, kBias, true>(i)) {}             \
  __device__ Name(unsigned int i) : bits(IntToHalfBits<kMant, kBias, false>(i)) {}   \
  __device__ Name(long long i) : bits(IntToHalfBits<kMant, kBias, true>(i)) {}       \
  __device__ Name(unsigned long long i) : bits(IntToHalfBits<kMant, kBias, false>(i)) {}

struct Half {
  unsigned short bits;
  Half() = default;
  __device__ Half(float x) : bits(FloatToF16Bits(x)) {}
  __device__ explicit Half(double x) : bits(DoubleToHalfBits<10, 15>(x)) {}
  CUBED_HALF_INT_CTORS(Half, 10, 15)
  __device__ operator float() const { return F16BitsToFloat(bits); }
  static __device__ Half FromBits(unsigned short b) {
    Half h;
    h.bits = b;
    return h;
  }
};
struct BF16 {
  unsigned short bits;
  BF16() = default;
  __device__ BF16(float x) : bits(FloatToBf16Bits(x)) {}
  __device__ explicit BF16(double x) : bits(DoubleToHalfBits<7, 127>(x)) {}
  CUBED_HALF_INT_CTORS(BF16, 7, 127)
  __device__ operator float() const { return __uint_as_float(static_cast<u32>(bits) << 16); }
  static __device__ BF16 FromBits(unsigned short b) {
    BF16 h;
    h.bits = b;
    return h;
  }
};
#undef CUBED_HALF_INT_CTORS
struct Bool8 {
  unsigned char v;
  Bool8() = default;
  __device__ Bool8(bool b) : v(b ? 1 : 0) {}
  __device__ operator bool() const { return v != 0; }
};

template <bool kCond, class A, class B>
struct Pick {
  typedef A type;
};
template <class A, class B>
struct Pick<false, A, B> {
  typedef B type;
};

// Per-type properties. `Wrap` is the type arithmetic runs in (integers: unsigned and at least
// 32 bits, so it wraps with no UB; f16/bf16: float); `Sum` is the accumulator of sum (f32 sums in
// f64, f16/bf16 in f32); `Wide` holds a value in a 4- or 8-byte register (max, min, argmax and
// their cross-block partials); `kHalf` marks f16 and bf16.
template <class T>
struct Num;
template <>
struct Num<float> {
  static constexpr bool kFloat = true;
  static constexpr bool kHalf = false;
  typedef float Wrap;
  typedef double Sum;
  typedef float Wide;
  static __device__ float Lowest() { return __int_as_float(0xff800000); }   // -inf
  static __device__ float Highest() { return __int_as_float(0x7f800000); }  // +inf
  static __device__ float NaN() { return __int_as_float(0x7fc00000); }
};
template <>
struct Num<double> {
  static constexpr bool kFloat = true;
  static constexpr bool kHalf = false;
  typedef double Wrap;
  typedef double Sum;
  typedef double Wide;
  static __device__ double Lowest() { return __longlong_as_double(0xfff0000000000000ll); }
  static __device__ double Highest() { return __longlong_as_double(0x7ff0000000000000ll); }
  static __device__ double NaN() { return __longlong_as_double(0x7ff8000000000000ll); }
};
#define CUBED_HALF_NUM(T, kInf, kNan)                                     \
  template <>                                                             \
  struct Num<T> {                                                         \
    static constexpr bool kFloat = true;                                  \
    static constexpr bool kHalf = true;                                   \
    typedef float Wrap;                                                   \
    typedef float Sum;                                                    \
    typedef float Wide;                                                   \
    static __device__ T Lowest() { return T::FromBits(0x8000 | (kInf)); } \
    static __device__ T Highest() { return T::FromBits(kInf); }           \
    static __device__ T NaN() { return T::FromBits(kNan); }               \
  };
CUBED_HALF_NUM(Half, 0x7c00, 0x7e00)
CUBED_HALF_NUM(BF16, 0x7f80, 0x7fc0)
#undef CUBED_HALF_NUM
#define CUBED_INT_NUM(T, kIsSigned, WrapT, WideT, kLow, kHigh) \
  template <>                                                  \
  struct Num<T> {                                              \
    static constexpr bool kFloat = false;                      \
    static constexpr bool kHalf = false;                       \
    static constexpr bool kSigned = kIsSigned;                 \
    typedef WrapT Wrap;                                        \
    typedef WrapT Sum;                                         \
    typedef WideT Wide;                                        \
    static __device__ T Lowest() { return kLow; }              \
    static __device__ T Highest() { return kHigh; }            \
  };
CUBED_INT_NUM(signed char, true, unsigned int, int, -128, 127)
CUBED_INT_NUM(unsigned char, false, unsigned int, unsigned int, 0, 255)
CUBED_INT_NUM(short, true, unsigned int, int, -32768, 32767)
CUBED_INT_NUM(unsigned short, false, unsigned int, unsigned int, 0, 65535)
CUBED_INT_NUM(int, true, unsigned int, int, -2147483647 - 1, 2147483647)
CUBED_INT_NUM(unsigned int, false, unsigned int, unsigned int, 0u, 0xffffffffu)
CUBED_INT_NUM(long long, true, unsigned long long, long long, -9223372036854775807ll - 1,
              9223372036854775807ll)
CUBED_INT_NUM(unsigned long long, false, unsigned long long, unsigned long long, 0ull, ~0ull)
CUBED_INT_NUM(Bool8, false, unsigned int, unsigned int, Bool8(false), Bool8(true))
#undef CUBED_INT_NUM

// The type T computes in: float for f16 and bf16, T otherwise.
template <class T>
struct ComputeOf {
  typedef typename Pick<Num<T>::kHalf, float, T>::type type;
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
// exp for results that round to f16 or bf16: the hardware's 2^x of x * log2(e) (relative error
// 2^-22, subnormal results kept; NaN and -inf as expf), far below a half type's rounding, in two
// instructions where expf takes about ten.
__device__ __forceinline__ float HalfExp(float x) {
  float y;
  asm("ex2.approx.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
  return y;
}
__device__ __forceinline__ float Log(float x) { return logf(x); }
__device__ __forceinline__ double Log(double x) { return log(x); }
__device__ __forceinline__ float Sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double Sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float Tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double Tanh(double x) { return tanh(x); }
__device__ __forceinline__ float Erfc(float x) { return erfcf(x); }
__device__ __forceinline__ double Erfc(double x) { return erfc(x); }
__device__ __forceinline__ float Pow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double Pow(double x, double y) { return pow(x, y); }
__device__ __forceinline__ float Fabs(float x) { return fabsf(x); }
__device__ __forceinline__ double Fabs(double x) { return fabs(x); }

// kernels/cpu/convert.h: static_cast where defined; float -> integer truncates, NaN gives 0 and
// out-of-range values saturate; f64 -> f32 overflows to +-inf; integer -> integer wraps; anything
// -> f16/bf16 rounds once from the exact value; x -> bool is x != 0, bool -> x is 1 or 0.
template <class To, class From>
__device__ __forceinline__ To Convert(From x) {
  if constexpr (Same<To, Bool8>::value) {
    return Bool8(static_cast<typename ComputeOf<From>::type>(x) != 0);
  } else if constexpr (Same<From, Bool8>::value) {
    return static_cast<To>(static_cast<bool>(x) ? 1 : 0);
  } else if constexpr (Num<From>::kHalf && !Num<To>::kHalf) {
    return Convert<To>(static_cast<float>(x));
  } else if constexpr (Num<From>::kFloat && !Num<To>::kFloat) {
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
    return static_cast<T>(-static_cast<typename ComputeOf<T>::type>(x));
  } else {
    typedef typename Num<T>::Wrap W;
    return static_cast<T>(W(0) - static_cast<W>(x));
  }
}
template <class T>
__device__ __forceinline__ T Abs(T x) {
  if constexpr (Num<T>::kFloat) {
    return static_cast<T>(Fabs(static_cast<typename ComputeOf<T>::type>(x)));
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
  return static_cast<T>(a / b);
}
// Max and Min return the first NaN of (a, b), else the greater (lesser), a when equal (so -0
// before +0 keeps its order). Selects, not branches: an early return per NaN test compiled into
// a branch and a convergence barrier per element of a reduction's fold (3 of its 8 loads then
// waited for registers). !(a >= b) is "a < b or either is NaN".
template <class T>
__device__ __forceinline__ T Max(T a, T b) {
  if constexpr (Same<T, Bool8>::value) {
    return Bool8(a || b);
  } else if constexpr (Num<T>::kFloat) {
    return !(a >= b) & (a == a) ? b : a;
  } else {
    return a < b ? b : a;
  }
}
template <class T>
__device__ __forceinline__ T Min(T a, T b) {
  if constexpr (Same<T, Bool8>::value) {
    return Bool8(a && b);
  } else if constexpr (Num<T>::kFloat) {
    return !(a <= b) & (a == a) ? b : a;
  } else {
    return b < a ? b : a;
  }
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

// The coordinate of row-major index `linear` along a dimension of `extent` (its remainder), and
// `linear` divided by it for the dimensions before; 32-bit division when both fit, which is
// several times cheaper on the GPU than 64-bit.
__device__ __forceinline__ u64 NextCoordinate(u64& linear, u64 extent) {
  if (linear <= 0xffffffffull && extent <= 0xffffffffull) {
    const u32 l32 = static_cast<u32>(linear), e32 = static_cast<u32>(extent);
    linear = l32 / e32;
    return l32 % e32;
  }
  const u64 c = linear % extent;
  linear /= extent;
  return c;
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
      const u64 c = NextCoordinate(linear, extent);
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

// The sum of a scalar type, for the all-reduces above (softmax, rms_norm).
template <class V>
struct SumCombine {
  static __device__ V Combine(V a, V b) { return a + b; }
  static __device__ V Shfl(V v, int m) { return ShflXor(v, m); }
};

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
