// Gather along one axis (numpy.take, torch.index_select): buffer 0 the table, buffer 1 the
// indices (I: int or long long), buffer 2 the output, shaped table.shape[:axis] + indices.shape +
// table.shape[axis + 1:]. An index k in [-n, 0) counts from the end (k + n); any other outside
// [0, n) writes zeros (n = table.shape[axis]). T is the unsigned type of the element size: gather
// moves bits, as copy does. Two ways to walk the output (CUBED_CUDA_GROUP_*, chosen on the host):
// a thread per output element over any layout, consecutive threads on the innermost dim; or, when
// the dims after the axis are dense in table and out, a warp or a block per row that reads its
// index once and copies the row with 16-byte vectors.
#include "common.cuh"

namespace cubed {

struct GatherOffsets {
  u64 table, index, out;
};

// Element offsets in table, indices and out of the position whose coordinates over out dims
// [0, dims) have the row-major index `linear`: out dims [0, axis) are table dims, [axis, axis + r)
// indices dims (r = indices rank) and [axis + r, rank) table dims (axis, table rank). The table
// offset leaves out the axis itself.
__device__ __forceinline__ GatherOffsets GatherUnravel(const CudaBuiltinArgs& a, u32 dims,
                                                       u64 linear) {
  const CudaTensorArg& table = a.buffers[0];
  const CudaTensorArg& indices = a.buffers[1];
  const CudaTensorArg& out = a.buffers[2];
  const u32 axis = a.axis, r = indices.rank;
  GatherOffsets o = {0, 0, 0};
#pragma unroll
  for (int d = CUBED_CUDA_MAX_RANK - 1; d >= 0; --d) {
    if (static_cast<u32>(d) < dims) {
      const u64 extent = out.shape[d];
      const u64 c = NextCoordinate(linear, extent);
      o.out += c * out.strides[d];
      if (static_cast<u32>(d) < axis) {
        o.table += c * table.strides[d];
      } else if (static_cast<u32>(d) < axis + r) {
        o.index += c * indices.strides[d - axis];
      } else {
        o.table += c * table.strides[d - r + 1];
      }
    }
  }
  return o;
}

// The table offset of index k read at `at`, or false when k is outside [-n, n).
template <class I>
__device__ __forceinline__ bool GatherRow(const CudaBuiltinArgs& a, const Buf<const I>& indices,
                                          u64 at, u64* offset) {
  const u32 axis = a.axis < CUBED_CUDA_MAX_RANK ? a.axis : 0;
  const long long n = static_cast<long long>(a.buffers[0].shape[axis]);  // < 2^32.
  long long k = static_cast<long long>(Load(indices, at));
  if (k < 0) k += n;
  if (k < 0 || k >= n) return false;
  *offset = static_cast<u64>(k) * a.buffers[0].strides[axis];
  return true;
}

template <class T, class I>
__global__ void GatherKernel(const __grid_constant__ CudaBuiltinArgs a) {
  const Buf<const T> x = BufOf<const T>(a.buffers[0]);
  const Buf<const I> indices = BufOf<const I>(a.buffers[1]);
  const Buf<T> y = BufOf<T>(a.buffers[2]);
  if (a.variant == CUBED_CUDA_GROUP_THREAD) {
    const u32 rank = a.buffers[2].rank;
    for (u64 i = GlobalThread(); i < a.count; i += GridThreads()) {
      const GatherOffsets o = GatherUnravel(a, rank, i);
      u64 k = 0;
      const bool valid = GatherRow(a, indices, o.index, &k);
      Store(y, o.out, valid ? Load(x, o.table + k) : T(0));
    }
    return;
  }
  // A row per group; its inner part (the dims after the axis) is dense in table and out.
  const Group g = GroupOf(a.variant);
  const CudaTensorArg& table = a.buffers[0];
  u64 inner = 1;
  for (u32 d = a.axis + 1; d < table.rank && d < CUBED_CUDA_MAX_RANK; ++d) inner *= table.shape[d];
  const u32 row_dims = a.axis + a.buffers[1].rank;
  constexpr u32 kV = 16 / sizeof(T);
  for (u64 row = static_cast<u64>(blockIdx.x) * g.per_block + g.index; row < a.count;
       row += static_cast<u64>(gridDim.x) * g.per_block) {
    const GatherOffsets o = GatherUnravel(a, row_dims, row);
    u64 k = 0;
    const bool valid = GatherRow(a, indices, o.index, &k);
    const u64 from = o.table + k;
    T* dst = y.p + o.out;
    const T* src = x.p + from;
    const bool fits = o.out + inner <= y.n && (!valid || from + inner <= x.n);
    if (fits && inner % kV == 0 && Aligned(dst, 16) && (!valid || Aligned(src, 16))) {
      Pack<T, kV>* d = reinterpret_cast<Pack<T, kV>*>(dst);
      const Pack<T, kV>* s = reinterpret_cast<const Pack<T, kV>*>(src);
      Pack<T, kV> zero;
#pragma unroll
      for (u32 e = 0; e < kV; ++e) zero.v[e] = T(0);
      for (u64 j = g.lane; j < inner / kV; j += g.size) d[j] = valid ? s[j] : zero;
    } else {
      for (u64 j = g.lane; j < inner; j += g.size) {
        Store(y, o.out + j, valid ? Load(x, from + j) : T(0));
      }
    }
  }
}

}  // namespace cubed
