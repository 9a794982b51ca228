#include "kernels/cpu/where.h"

#include "absl/strings/str_cat.h"
#include "kernels/cpu/parallel_for.h"
#include "kernels/cpu/strided_loop.h"

namespace cubed::kernels {
namespace {

// The bits of one element: where selects, it never computes, so it dispatches on the size.
template <typename T>
void WhereLoop(const KernelArgs& args) {
  const TensorLayout& out = args.meta.tensors[3];
  const StridedLoop<4> loop(
      out, {BroadcastStrides(args.meta.tensors[0]), BroadcastStrides(args.meta.tensors[1]),
            BroadcastStrides(args.meta.tensors[2]), out.strides});
  const uint8_t* c = BufferAs<const uint8_t>(args, 0);
  const T* x = BufferAs<const T>(args, 1);
  const T* y = BufferAs<const T>(args, 2);
  T* o = BufferAs<T>(args, 3);
  ParallelFor(loop.size(), kElementwiseGrain, [&](uint64_t begin, uint64_t end) {
    loop.ForRuns(begin, end, [&](const auto& off, uint64_t n, const auto& step) {
      const uint8_t* cs = c + off[0];
      const T* xs = x + off[1];
      const T* ys = y + off[2];
      T* os = o + off[3];
      if (step[0] == 1 && step[1] == 1 && step[2] == 1 && step[3] == 1) {
        for (uint64_t i = 0; i < n; ++i) os[i] = cs[i] != 0 ? xs[i] : ys[i];
      } else if (step[0] == 1 && step[1] == 1 && step[2] == 0 && step[3] == 1) {
        const T yv = *ys;  // A mask over one value (e.g. -inf for attention).
        for (uint64_t i = 0; i < n; ++i) os[i] = cs[i] != 0 ? xs[i] : yv;
      } else {
        for (uint64_t i = 0; i < n; ++i) {
          os[i * step[3]] = cs[i * step[0]] != 0 ? xs[i * step[1]] : ys[i * step[2]];
        }
      }
    });
  });
}

}  // namespace

absl::Status RunWhere(const KernelArgs& args) {
  switch (ElemSize(args.call.dtype)) {
    case 1:
      WhereLoop<uint8_t>(args);
      return absl::OkStatus();
    case 2:
      WhereLoop<uint16_t>(args);
      return absl::OkStatus();
    case 4:
      WhereLoop<uint32_t>(args);
      return absl::OkStatus();
    case 8:
      WhereLoop<uint64_t>(args);
      return absl::OkStatus();
  }
  return absl::InternalError(
      absl::StrCat("where: dtype ", ElemTypeName(args.call.dtype), " has no element size"));
}

}  // namespace cubed::kernels
