// Elementwise builtin kernels: fill, copy, cast, unary (neg abs relu exp log sqrt sigmoid tanh
// gelu gelu_tanh silu), binary with broadcasting (add sub mul div max min pow) and the comparisons
// (eq ne lt le gt ge, bool out). One grid-stride loop over the output's elements; when every
// buffer is dense with the output's shape (CUBED_CUDA_DENSE) all buffers share the linear index
// and, when aligned, move CUBED_CUDA_DENSE_PACK elements per load and store (Note [Dense packs]);
// when the inputs are dense blocks of the output's trailing dims (CUBED_CUDA_SUFFIX: a bias row,
// a scalar) each reads index i modulo its size, 4 at a time.
#include "common.cuh"

namespace cubed {

// Calls f with the first kIn of (x0, x1).
template <int kIn, class F, class In>
__device__ __forceinline__ auto Apply(const F& f, In x0, In x1) {
  if constexpr (kIn == 0) {
    return f();
  } else if constexpr (kIn == 1) {
    return f(x0);
  } else {
    return f(x0, x1);
  }
}

// i % n along a grid-stride loop (i = first, first + step, ...), without a division per step.
struct Cyclic {
  u64 k, inc, n;
  __device__ Cyclic(u64 first, u64 step, u64 period)
      : k(first % period), inc(step % period), n(period) {}
  __device__ void Next() {
    k += inc;
    if (k >= n) k -= n;
  }
};

// Note [Dense packs]: on the dense path a thread moves 16 bytes a step of the wider of its input
// and output elements (2 of 8 bytes .. 16 of 1 byte). 4 elements of 1 or 2 bytes kept too few bytes
// in flight (GPU run 55: add of i8 at 0.84x of torch, i8 -> u8 at 0.66x of copy bandwidth; run 56
// with 16 bytes: 1.17x and 0.90x). Sizing by the input alone made widening casts far slower
// (run 56: i8 -> f64 0.49 -> 0.12x of copy bandwidth): 128 bytes a thread means a warp's store
// instruction touches 32 lines. Two packs a step (more loads in flight) was tried in run 56 too:
// adds of 8-byte types fell to 0.71-0.78x of torch, so one. 4 elements of 8 bytes (32 bytes a
// thread, two 16-byte stores half a warp's span apart) wrote at 0.40x of torch's fill (run 57:
// fill f64 1828 vs 4577 GB/s; f32 0.95x). The launch sizes its grid by the same count
// (CUBED_CUDA_DENSE_PACK, builtin_args.h).

// Elements of a buffer's tensor (the product of its shape).
__device__ __forceinline__ u64 Elements(const CudaTensorArg& t) {
  u64 n = 1;
  for (u32 d = 0; d < t.rank && d < CUBED_CUDA_MAX_RANK; ++d) n *= t.shape[d];
  return n;
}

// CUBED_CUDA_SUFFIX: out[i] = f(in0[i % n0], in1[i % n1]), every buffer dense (bounds checked by
// the caller); 4 elements per load and store when every period is a multiple of 4 and aligned.
template <int kIn, class In, class Out, class F>
__device__ __forceinline__ void MapSuffix(const Buf<const In>& x0, u64 n0, const Buf<const In>& x1,
                                          u64 n1, const Buf<Out>& y, u64 count, const F& f) {
  constexpr int V = 4;
  const u64 first = GlobalThread(), step = GridThreads();
  u64 done = 0;
  if (n0 % V == 0 && n1 % V == 0 && Aligned(y.p, sizeof(Out) * V) &&
      Aligned(x0.p, sizeof(In) * V) && Aligned(x1.p, sizeof(In) * V)) {
    const u64 packs = count / V;
    const Pack<In, V>* p0 = reinterpret_cast<const Pack<In, V>*>(x0.p);
    const Pack<In, V>* p1 = reinterpret_cast<const Pack<In, V>*>(x1.p);
    Pack<Out, V>* q = reinterpret_cast<Pack<Out, V>*>(y.p);
    Cyclic j0(first, step, n0 / V), j1(first, step, n1 / V);
    for (u64 j = first; j < packs; j += step, j0.Next(), j1.Next()) {
      const Pack<In, V> v0 = p0[j0.k];
      Pack<In, V> v1;
      if constexpr (kIn > 1) v1 = p1[j1.k];
      Pack<Out, V> r;
#pragma unroll
      for (int k = 0; k < V; ++k) r.v[k] = Apply<kIn>(f, v0.v[k], v1.v[k]);
      q[j] = r;
    }
    done = packs * V;
  }
  Cyclic i0(done + first, step, n0), i1(done + first, step, n1);
  for (u64 i = done + first; i < count; i += step, i0.Next(), i1.Next()) {
    In v1 = In(0);
    if constexpr (kIn > 1) v1 = x1.p[i1.k];
    y.p[i] = Apply<kIn>(f, x0.p[i0.k], v1);
  }
}

// out[i] = f(in0[i], in1[i]) over the output's elements: buffers 0 .. kIn - 1 are inputs of type
// In, buffer kIn is the output of type Out. Inputs are read through their broadcast strides.
template <int kIn, class In, class Out, class F>
__device__ __forceinline__ void Map(const CudaBuiltinArgs& a, const F& f) {
  const Buf<const In> x0 = BufOf<const In>(a.buffers[0]);
  const Buf<const In> x1 = BufOf<const In>(a.buffers[kIn > 1 ? 1 : 0]);
  const Buf<Out> y = BufOf<Out>(a.buffers[kIn]);
  const u64 count = a.count;
  const u64 first = GlobalThread(), step = GridThreads();
  const bool in_bounds = count <= y.n && (kIn < 1 || count <= x0.n) && (kIn < 2 || count <= x1.n);
  if ((a.flags & CUBED_CUDA_DENSE) != 0 && in_bounds) {
    constexpr int V =
        CUBED_CUDA_DENSE_PACK(kIn > 0 && sizeof(In) > sizeof(Out) ? sizeof(In) : sizeof(Out));
    u64 done = 0;
    if (Aligned(y.p, sizeof(Out) * V) && (kIn < 1 || Aligned(x0.p, sizeof(In) * V)) &&
        (kIn < 2 || Aligned(x1.p, sizeof(In) * V))) {
      const u64 packs = count / V;
      const Pack<In, V>* p0 = reinterpret_cast<const Pack<In, V>*>(x0.p);
      const Pack<In, V>* p1 = reinterpret_cast<const Pack<In, V>*>(x1.p);
      Pack<Out, V>* q = reinterpret_cast<Pack<Out, V>*>(y.p);
      for (u64 j = first; j < packs; j += step) {
        Pack<In, V> v0, v1;
        if constexpr (kIn > 0) v0 = p0[j];
        if constexpr (kIn > 1) v1 = p1[j];
        Pack<Out, V> r;
#pragma unroll
        for (int k = 0; k < V; ++k) r.v[k] = Apply<kIn>(f, v0.v[k], v1.v[k]);
        q[j] = r;
      }
      done = packs * V;
    }
    for (u64 i = done + first; i < count; i += step) {
      In v0 = In(0), v1 = In(0);
      if constexpr (kIn > 0) v0 = x0.p[i];
      if constexpr (kIn > 1) v1 = x1.p[i];
      y.p[i] = Apply<kIn>(f, v0, v1);
    }
    return;
  }
  if ((a.flags & CUBED_CUDA_SUFFIX) != 0 && kIn > 0) {
    const u64 n0 = Elements(a.buffers[0]), n1 = Elements(a.buffers[kIn > 1 ? 1 : 0]);
    if (count <= y.n && n0 > 0 && n0 <= x0.n && n1 > 0 && n1 <= x1.n) {
      MapSuffix<kIn, In, Out>(x0, n0, x1, n1, y, count, f);
      return;
    }
  }
  const int tensors[3] = {0, kIn > 1 ? 1 : 0, kIn};
  const u32 rank = a.buffers[kIn].rank;
  for (u64 i = first; i < count; i += step) {
    u64 off[3];
    Unravel<3>(a, tensors, kIn, rank, CUBED_CUDA_MAX_RANK, i, off);
    In v0 = In(0), v1 = In(0);
    if constexpr (kIn > 0) v0 = Load(x0, off[0]);
    if constexpr (kIn > 1) v1 = Load(x1, off[1]);
    Store(y, off[2], Apply<kIn>(f, v0, v1));
  }
}

// fill and copy move bits: instantiated for the unsigned types of 1, 2, 4 and 8 bytes only.
template <class T>
struct FillValue {
  T value;
  __device__ T operator()() const { return value; }
};
template <class T>
__global__ void FillKernel(const __grid_constant__ CudaBuiltinArgs a) {
  Map<0, T, T>(a, FillValue<T>{static_cast<T>(a.scalar)});
}

template <class From, class To>
struct CastOp {
  __device__ To operator()(From x) const { return Convert<To>(x); }
};
template <class From, class To>
__global__ void CastKernel(const __grid_constant__ CudaBuiltinArgs a) {
  Map<1, From, To>(a, CastOp<From, To>());
}

template <class T>
struct NegOp {
  __device__ T operator()(T x) const { return Neg(x); }
};
template <class T>
struct AbsOp {
  __device__ T operator()(T x) const { return Abs(x); }
};
template <class T>
struct ReluOp {
  // x < 0 is false for NaN and -0.0: both pass through.
  __device__ T operator()(T x) const {
    typedef typename ComputeOf<T>::type C;
    return static_cast<C>(x) < C(0) ? T(0) : x;
  }
};
template <class T>
struct ExpOp {
  __device__ T operator()(T x) const { return static_cast<T>(Exp(x)); }
};
template <class T>
struct LogOp {
  __device__ T operator()(T x) const { return static_cast<T>(Log(x)); }
};
template <class T>
struct SqrtOp {
  __device__ T operator()(T x) const { return static_cast<T>(Sqrt(x)); }
};
// Only ever exponentiates a non-positive number, so nothing overflows.
template <class C>
__device__ __forceinline__ C Sigmoid(C v) {
  if (v >= C(0)) return C(1) / (C(1) + Exp(-v));
  const C e = Exp(v);
  return e / (C(1) + e);
}
template <class T>
struct SigmoidOp {
  __device__ T operator()(T x) const {
    return static_cast<T>(Sigmoid(static_cast<typename ComputeOf<T>::type>(x)));
  }
};
// Note [Activation tails] (kernels/cpu/elementwise.cc): x times a gate computed without
// cancellation as x -> -inf, and -inf gives -0, exactly as the CPU.
template <class T>
struct GeluOp {
  __device__ T operator()(T x) const {
    typedef typename ComputeOf<T>::type C;
    const C v = static_cast<C>(x);
    if (v == Num<C>::Lowest()) return static_cast<T>(-C(0));
    return static_cast<T>(C(0.5) * v * Erfc(-v * C(0.70710678118654752440)));
  }
};
template <class T>
struct GeluTanhOp {
  __device__ T operator()(T x) const {
    typedef typename ComputeOf<T>::type C;
    const C v = static_cast<C>(x);
    if (v == Num<C>::Lowest()) return static_cast<T>(-C(0));
    const C u = C(0.79788456080286535588) * (v + C(0.044715) * v * v * v);
    return static_cast<T>(v * Sigmoid(C(2) * u));
  }
};
template <class T>
struct SiluOp {
  __device__ T operator()(T x) const {
    typedef typename ComputeOf<T>::type C;
    const C v = static_cast<C>(x);
    if (v == Num<C>::Lowest()) return static_cast<T>(-C(0));
    return static_cast<T>(v * Sigmoid(v));
  }
};
template <class T>
struct TanhOp {
  __device__ T operator()(T x) const { return static_cast<T>(Tanh(x)); }
};
template <template <class> class Op, class T>
__global__ void UnaryKernel(const __grid_constant__ CudaBuiltinArgs a) {
  Map<1, T, T>(a, Op<T>());
}

template <class T>
struct AddOp {
  __device__ T operator()(T x, T y) const { return Add(x, y); }
};
template <class T>
struct SubOp {
  __device__ T operator()(T x, T y) const { return Sub(x, y); }
};
template <class T>
struct MulOp {
  __device__ T operator()(T x, T y) const { return Mul(x, y); }
};
template <class T>
struct DivOp {
  __device__ T operator()(T x, T y) const { return Div(x, y); }
};
template <class T>
struct MaxOp {
  __device__ T operator()(T x, T y) const { return Max(x, y); }
};
template <class T>
struct MinOp {
  __device__ T operator()(T x, T y) const { return Min(x, y); }
};
template <class T>
struct PowOp {
  __device__ T operator()(T x, T y) const { return static_cast<T>(Pow(x, y)); }
};
template <template <class> class Op, class T>
__global__ void BinaryKernel(const __grid_constant__ CudaBuiltinArgs a) {
  Map<2, T, T>(a, Op<T>());
}

// Comparisons write bool; C++'s operators are IEEE 754's (false with a NaN operand, but for !=).
// Halves compare by value in float, bool as a truth value (kernels/cpu/binary.h).
template <class T>
struct CompareOf {
  typedef typename Pick<Same<T, Bool8>::value, bool, typename ComputeOf<T>::type>::type type;
};
template <class T>
__device__ __forceinline__ typename CompareOf<T>::type Comparable(T x) {
  return static_cast<typename CompareOf<T>::type>(x);
}
#define CUBED_COMPARE_OP(Name, op)                                                                \
  template <class T>                                                                              \
  struct Name {                                                                                   \
    __device__ Bool8 operator()(T x, T y) const { return Bool8(Comparable(x) op Comparable(y)); } \
  };
CUBED_COMPARE_OP(EqOp, ==)
CUBED_COMPARE_OP(NeOp, !=)
CUBED_COMPARE_OP(LtOp, <)
CUBED_COMPARE_OP(LeOp, <=)
CUBED_COMPARE_OP(GtOp, >)
CUBED_COMPARE_OP(GeOp, >=)
#undef CUBED_COMPARE_OP
template <template <class> class Op, class T>
__global__ void CompareKernel(const __grid_constant__ CudaBuiltinArgs a) {
  Map<2, T, Bool8>(a, Op<T>());
}

}  // namespace cubed
