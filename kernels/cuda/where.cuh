// where(cond, x, y) -> out with broadcasting: out = cond ? x : y, any non-zero cond byte true.
// The chosen element's bits move as they are (NaN payloads, -0), so one kernel per element size
// serves every dtype, as fill and copy do. Dense buffers of the output's shape (CUBED_CUDA_DENSE)
// share the linear index and, when aligned, move 4 elements per load and store.
#include "common.cuh"

namespace cubed {

template <class T>
__global__ void WhereKernel(const __grid_constant__ CudaBuiltinArgs a) {
  typedef unsigned char Cond;
  const Buf<const Cond> c = BufOf<const Cond>(a.buffers[0]);
  const Buf<const T> x = BufOf<const T>(a.buffers[1]);
  const Buf<const T> y = BufOf<const T>(a.buffers[2]);
  const Buf<T> o = BufOf<T>(a.buffers[3]);
  const u64 count = a.count;
  const u64 first = GlobalThread(), step = GridThreads();
  const bool in_bounds = count <= c.n && count <= x.n && count <= y.n && count <= o.n;
  if ((a.flags & CUBED_CUDA_DENSE) != 0 && in_bounds) {
    constexpr int V = 4;
    u64 done = 0;
    if (Aligned(c.p, V) && Aligned(x.p, sizeof(T) * V) && Aligned(y.p, sizeof(T) * V) &&
        Aligned(o.p, sizeof(T) * V)) {
      const u64 packs = count / V;
      const Pack<Cond, V>* pc = reinterpret_cast<const Pack<Cond, V>*>(c.p);
      const Pack<T, V>* px = reinterpret_cast<const Pack<T, V>*>(x.p);
      const Pack<T, V>* py = reinterpret_cast<const Pack<T, V>*>(y.p);
      Pack<T, V>* po = reinterpret_cast<Pack<T, V>*>(o.p);
      for (u64 j = first; j < packs; j += step) {
        const Pack<Cond, V> cv = pc[j];
        const Pack<T, V> xv = px[j], yv = py[j];
        Pack<T, V> r;
#pragma unroll
        for (int k = 0; k < V; ++k) r.v[k] = cv.v[k] != 0 ? xv.v[k] : yv.v[k];
        po[j] = r;
      }
      done = packs * V;
    }
    for (u64 i = done + first; i < count; i += step) o.p[i] = c.p[i] != 0 ? x.p[i] : y.p[i];
    return;
  }
  const int tensors[4] = {0, 1, 2, 3};
  const u32 rank = a.buffers[3].rank;
  for (u64 i = first; i < count; i += step) {
    u64 off[4];
    Unravel<4>(a, tensors, 3, rank, CUBED_CUDA_MAX_RANK, i, off);
    Store(o, off[3], Load(c, off[0]) != 0 ? Load(x, off[1]) : Load(y, off[2]));
  }
}

}  // namespace cubed
