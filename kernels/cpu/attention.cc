#include "kernels/cpu/attention.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/dtype_dispatch.h"
#include "kernels/cpu/parallel_for.h"
#include "kernels/cpu/scalar_ops.h"
#include "kernels/cpu/strided_loop.h"
#include "kernels/validate.h"

namespace cubed::kernels {
namespace {

constexpr uint32_t kQ = 0, kK = 1, kV = 2, kOut = 3;

// Element offsets of batch `b` (row-major over out's dims before the last two) in q, k, v and
// out; a dim an input holds once (size 1) broadcasts whatever its stored stride.
std::array<uint64_t, 4> BatchOffsets(const KernelMetadata& meta, uint64_t b) {
  const TensorLayout& out = meta.tensors[kOut];
  std::array<uint64_t, 4> off = {0, 0, 0, 0};
  for (uint32_t d = out.rank - 2; d-- > 0;) {
    const uint64_t c = b % out.shape[d];
    b /= out.shape[d];
    for (uint32_t i = 0; i < 4; ++i) {
      const TensorLayout& t = meta.tensors[i];
      if (t.shape[d] != 1) off[i] += c * t.strides[d];
    }
  }
  return off;
}

template <typename T>
void AttentionLoop(const KernelArgs& args) {
  using C = ComputeType<T>;
  using Sum = std::conditional_t<kIsHalf<T>, float, double>;
  const KernelMetadata& meta = args.meta;
  const TensorLayout& q = meta.tensors[kQ];
  const TensorLayout& k = meta.tensors[kK];
  const TensorLayout& v = meta.tensors[kV];
  const TensorLayout& out = meta.tensors[kOut];
  const uint32_t r = out.rank;
  const uint64_t len_q = out.shape[r - 2], e = q.shape[r - 1], len_k = k.shape[r - 2];
  const uint64_t ev = out.shape[r - 1];
  // Row and column strides; a dim of size 1 is never stepped along.
  const uint64_t q_rs = q.strides[r - 2], q_cs = q.strides[r - 1];
  const uint64_t k_rs = k.strides[r - 2], k_cs = k.strides[r - 1];
  const uint64_t v_rs = v.strides[r - 2], v_cs = v.strides[r - 1];
  const uint64_t o_rs = out.strides[r - 2], o_cs = out.strides[r - 1];
  const C scale = Convert<C>(FloatScalar(args.call));
  const T* qp = BufferAs<const T>(args, kQ);
  const T* kp = BufferAs<const T>(args, kK);
  const T* vp = BufferAs<const T>(args, kV);
  T* op = BufferAs<T>(args, kOut);
  const uint64_t rows = ev == 0 || len_q == 0 ? 0 : out.NumElements() / ev;
  // A row costs about S * (E + Ev) multiply-adds.
  const uint64_t row_work = std::max<uint64_t>(1, len_k * (e + ev));
  const uint64_t grain = std::max<uint64_t>(1, kElementwiseGrain / row_work);
  ParallelFor(rows, grain, [&](uint64_t begin, uint64_t end) {
    std::vector<C> scores(len_k);
    std::vector<C> acc(ev);
    for (uint64_t row = begin; row < end; ++row) {
      const uint64_t i = row % len_q;
      const std::array<uint64_t, 4> off = BatchOffsets(meta, row / len_q);
      const T* qi = qp + off[kQ] + i * q_rs;
      const uint64_t visible = std::min(len_k, i + 1);
      C m = -std::numeric_limits<C>::infinity();
      for (uint64_t s = 0; s < visible; ++s) {
        const T* ks = kp + off[kK] + s * k_rs;
        C dot = 0;
        for (uint64_t j = 0; j < e; ++j) {
          dot += static_cast<C>(qi[j * q_cs]) * static_cast<C>(ks[j * k_cs]);
        }
        scores[s] = dot * scale;
        m = Max(m, scores[s]);
      }
      std::fill(acc.begin(), acc.end(), C(0));
      Sum sum = 0;
      for (uint64_t s = 0; s < visible; ++s) {
        const C p = std::exp(scores[s] - m);
        sum += p;
        const T* vs = vp + off[kV] + s * v_rs;
        for (uint64_t j = 0; j < ev; ++j) acc[j] += p * static_cast<C>(vs[j * v_cs]);
      }
      // No keys (S = 0): zeros. A NaN sum stays NaN.
      const C inv = sum == 0 ? C(0) : Convert<C>(1.0 / static_cast<double>(sum));
      T* oi = op + off[kOut] + i * o_rs;
      for (uint64_t j = 0; j < ev; ++j) oi[j * o_cs] = static_cast<T>(acc[j] * inv);
    }
  });
}

}  // namespace

absl::Status RunCausalAttention(const KernelArgs& args) {
  return DispatchDtype<kFloatTypes>(args.call.dtype, [&](auto tag) {
    AttentionLoop<decltype(tag)>(args);
    return absl::OkStatus();
  });
}

}  // namespace cubed::kernels
