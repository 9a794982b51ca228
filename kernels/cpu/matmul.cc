#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/cpu/dtype_dispatch.h"
#include "kernels/cpu/parallel_for.h"
#include "kernels/cpu/scalar_ops.h"
#include "kernels/cpu/strided_loop.h"

namespace cubed::kernels {
namespace {

// Note [Matmul blocking]
// Work is split into units of up to kRowBlock rows of one batch. A unit walks N in panels of
// kColBlock columns and K in slabs of kDepthBlock; the kDepthBlock x kColBlock slab of b (read
// in place when its rows are contiguous, else packed) stays in L2 while every row of the unit
// uses it, four rows at a time so that each loaded b element feeds four accumulators. The inner
// loop (ikj order) runs over contiguous columns and vectorizes. Accumulators are T for floats
// (f32 accumulates in f32; f16 and bf16 in f32, rounded once on store) and the unsigned type for
// integers (wrapping, no UB).
constexpr uint64_t kRowBlock = 32;
constexpr uint64_t kColBlock = 256;
constexpr uint64_t kDepthBlock = 256;
// Below this many multiply-adds a call runs on the calling thread.
constexpr uint64_t kSerialWork = 1 << 16;

struct Geometry {
  uint64_t m, n, k;
  uint64_t a_row, a_col, b_row, b_col, c_row, c_col;  // Strides of the last two dims.
};

// c_r[j] += a_r * b[j] for the four rows r and j < n: the innermost loop.
template <typename Acc, typename B>
void UpdateFourRows(Acc* __restrict c0, Acc* __restrict c1, Acc* __restrict c2, Acc* __restrict c3,
                    const B* __restrict b, Acc a0, Acc a1, Acc a2, Acc a3, uint64_t n) {
  for (uint64_t j = 0; j < n; ++j) {
    const Acc bv = static_cast<Acc>(b[j]);
    c0[j] += a0 * bv;
    c1[j] += a1 * bv;
    c2[j] += a2 * bv;
    c3[j] += a3 * bv;
  }
}

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
// The f32 case is also compiled for AVX2 + FMA and picked when the CPU has them (an ifunc
// resolved once at load time); the default clone is plain SSE2.
__attribute__((target_clones("arch=haswell", "default"))) void UpdateFourRows(
    float* __restrict c0, float* __restrict c1, float* __restrict c2, float* __restrict c3,
    const float* __restrict b, float a0, float a1, float a2, float a3, uint64_t n) {
  for (uint64_t j = 0; j < n; ++j) {
    const float bv = b[j];
    c0[j] += a0 * bv;
    c1[j] += a1 * bv;
    c2[j] += a2 * bv;
    c3[j] += a3 * bv;
  }
}
#endif

// Scratch and code for units of one call; one per ParallelFor chunk, reused across its units.
template <typename T>
class MatmulWorker {
 public:
  using Acc = Wrap<T>;

  explicit MatmulWorker(const Geometry& g) : g_(g), ld_(std::min(g.n, kColBlock)) {}

  // Rows [r0, r1) of the batch whose matrices start at a, b and c.
  void Run(const T* a, const T* b, T* c, uint64_t r0, uint64_t r1) {
    a_ = a;
    const uint64_t rows = r1 - r0;
    tile_.resize(rows * ld_);
    for (uint64_t j0 = 0; j0 < g_.n; j0 += kColBlock) {
      const uint64_t nb = std::min(kColBlock, g_.n - j0);
      std::fill(tile_.begin(), tile_.end(), Acc{0});
      for (uint64_t k0 = 0; k0 < g_.k; k0 += kDepthBlock) {
        const uint64_t kb = std::min(kDepthBlock, g_.k - k0);
        const T* src = b + k0 * g_.b_row + j0 * g_.b_col;
        if constexpr (std::is_same_v<Acc, T>) {
          if (g_.b_col == 1) {
            AccumulateSlab(r0, rows, k0, kb, src, g_.b_row, nb);
            continue;
          }
        }
        panel_.resize(kDepthBlock * ld_);
        for (uint64_t k = 0; k < kb; ++k) {
          const T* row = src + k * g_.b_row;
          Acc* dst = panel_.data() + k * ld_;
          for (uint64_t j = 0; j < nb; ++j) dst[j] = static_cast<Acc>(row[j * g_.b_col]);
        }
        AccumulateSlab(r0, rows, k0, kb, panel_.data(), ld_, nb);
      }
      for (uint64_t r = 0; r < rows; ++r) {
        T* dst = c + (r0 + r) * g_.c_row + j0 * g_.c_col;
        const Acc* acc = tile_.data() + r * ld_;
        for (uint64_t j = 0; j < nb; ++j) dst[j * g_.c_col] = static_cast<T>(acc[j]);
      }
    }
  }

 private:
  Acc A(uint64_t i, uint64_t k) const { return static_cast<Acc>(a_[i * g_.a_row + k * g_.a_col]); }

  template <typename B>
  void AccumulateSlab(uint64_t r0, uint64_t rows, uint64_t k0, uint64_t kb, const B* slab,
                      uint64_t slab_row, uint64_t nb) {
    uint64_t r = 0;
    for (; r + 4 <= rows; r += 4) {
      Acc* c0 = tile_.data() + r * ld_;
      Acc* c1 = c0 + ld_;
      Acc* c2 = c1 + ld_;
      Acc* c3 = c2 + ld_;
      const uint64_t i = r0 + r;
      for (uint64_t k = 0; k < kb; ++k) {
        const Acc a0 = A(i, k0 + k), a1 = A(i + 1, k0 + k), a2 = A(i + 2, k0 + k),
                  a3 = A(i + 3, k0 + k);
        UpdateFourRows(c0, c1, c2, c3, slab + k * slab_row, a0, a1, a2, a3, nb);
      }
    }
    for (; r < rows; ++r) {
      Acc* c0 = tile_.data() + r * ld_;
      for (uint64_t k = 0; k < kb; ++k) {
        const Acc a0 = A(r0 + r, k0 + k);
        const B* bk = slab + k * slab_row;
        for (uint64_t j = 0; j < nb; ++j) c0[j] += a0 * static_cast<Acc>(bk[j]);
      }
    }
  }

  const Geometry& g_;
  const uint64_t ld_;  // Row stride of tile_ and panel_.
  const T* a_ = nullptr;
  std::vector<Acc> tile_;
  std::vector<Acc> panel_;
};

template <typename T>
void MatmulLoop(const KernelArgs& args) {
  const TensorLayout& a = args.meta.tensors[0];
  const TensorLayout& b = args.meta.tensors[1];
  const TensorLayout& c = args.meta.tensors[2];
  const uint32_t r = c.rank;
  const Geometry g{c.shape[r - 2],   c.shape[r - 1],   a.shape[r - 1],
                   a.strides[r - 2], a.strides[r - 1], b.strides[r - 2],
                   b.strides[r - 1], c.strides[r - 2], c.strides[r - 1]};
  // The batch dims, walked with broadcast strides.
  TensorLayout batch = c;
  batch.rank = r - 2;
  const StridedLoop<3> batches(batch, {BroadcastStrides(a), BroadcastStrides(b), c.strides});
  const uint64_t num_batches = batches.size();
  if (num_batches == 0 || g.m == 0 || g.n == 0) return;
  const uint64_t row_blocks_per_batch = (g.m + kRowBlock - 1) / kRowBlock;
  const uint64_t units = num_batches * row_blocks_per_batch;
  const uint64_t work_per_unit = std::min(kRowBlock, g.m) * g.n * std::max<uint64_t>(g.k, 1);
  const uint64_t grain = std::max<uint64_t>(1, kSerialWork / std::max<uint64_t>(work_per_unit, 1));
  const T* pa = BufferAs<const T>(args, 0);
  const T* pb = BufferAs<const T>(args, 1);
  T* pc = BufferAs<T>(args, 2);
  ParallelFor(units, grain, [&](uint64_t begin, uint64_t end) {
    MatmulWorker<T> worker(g);
    for (uint64_t u = begin; u < end; ++u) {
      const auto off = batches.At(u / row_blocks_per_batch);
      const uint64_t r0 = (u % row_blocks_per_batch) * kRowBlock;
      worker.Run(pa + off[0], pb + off[1], pc + off[2], r0, std::min(g.m, r0 + kRowBlock));
    }
  });
}

}  // namespace

absl::Status RunMatmul(const KernelArgs& args) {
  return DispatchDtype<kNumericTypes>(args.call.dtype, [&](auto tag) {
    MatmulLoop<decltype(tag)>(args);
    return absl::OkStatus();
  });
}

}  // namespace cubed::kernels
