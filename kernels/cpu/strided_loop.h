#pragma once

// Walking strided tensors: the element offsets of several operands that move together over one
// logical shape (the output's), in row-major order, with broadcast dims given stride 0.

#include <array>
#include <cstdint>

#include "common/kernel_metadata.h"

namespace cubed::kernels {

// Offsets (in elements) of K operands over a shape. Construction drops size-1 dims and merges
// adjacent dims that are contiguous in every operand, so dense tensors become one long run: this
// is the contiguous fast path of every elementwise kernel. Immutable; safe to share across threads.
template <size_t K>
class StridedLoop {
 public:
  using Offsets = std::array<uint64_t, K>;

  // `strides[k][d]` is operand k's stride along dim d of `shape` (rank <= kMaxRank).
  StridedLoop(const TensorLayout& shape,
              const std::array<std::array<uint64_t, kMaxRank>, K>& strides) {
    size_ = 1;
    rank_ = 0;
    for (uint32_t d = 0; d < shape.rank; ++d) {
      size_ *= shape.shape[d];
      if (shape.shape[d] == 1) continue;
      bool merge = rank_ > 0;
      for (size_t k = 0; k < K && merge; ++k) {
        merge = strides_[k][rank_ - 1] == strides[k][d] * shape.shape[d];
      }
      if (merge) {
        shape_[rank_ - 1] *= shape.shape[d];
        for (size_t k = 0; k < K; ++k) strides_[k][rank_ - 1] = strides[k][d];
      } else {
        shape_[rank_] = shape.shape[d];
        for (size_t k = 0; k < K; ++k) strides_[k][rank_] = strides[k][d];
        ++rank_;
      }
    }
    if (rank_ == 0) {  // A single element (or none when some dim is 0, since size_ says so).
      shape_[0] = 1;
      for (size_t k = 0; k < K; ++k) strides_[k][0] = 0;
      rank_ = 1;
    }
  }

  // Number of logical elements.
  uint64_t size() const { return size_; }

  // Offsets of the element with row-major linear index `linear` (< size()).
  Offsets At(uint64_t linear) const {
    Offsets off{};
    for (uint32_t d = rank_; d-- > 0;) {
      const uint64_t i = linear % shape_[d];
      linear /= shape_[d];
      for (size_t k = 0; k < K; ++k) off[k] += i * strides_[k][d];
    }
    return off;
  }

  // Calls fn(offsets, count, steps) for consecutive runs along the innermost dim that together
  // cover the linear range [begin, end): element i of a run is at offsets[k] + i * steps[k].
  template <typename Fn>
  void ForRuns(uint64_t begin, uint64_t end, Fn&& fn) const {
    if (begin >= end) return;
    std::array<uint64_t, kMaxRank> idx{};
    uint64_t rest = begin;
    for (uint32_t d = rank_; d-- > 0;) {
      idx[d] = rest % shape_[d];
      rest /= shape_[d];
    }
    Offsets steps;
    for (size_t k = 0; k < K; ++k) steps[k] = strides_[k][rank_ - 1];
    const uint32_t last = rank_ - 1;
    uint64_t pos = begin;
    while (pos < end) {
      Offsets off{};
      for (uint32_t d = 0; d < rank_; ++d) {
        for (size_t k = 0; k < K; ++k) off[k] += idx[d] * strides_[k][d];
      }
      uint64_t count = shape_[last] - idx[last];
      if (count > end - pos) count = end - pos;
      fn(off, count, steps);
      pos += count;
      idx[last] += count;
      for (uint32_t d = last; d > 0 && idx[d] == shape_[d]; --d) {
        idx[d] = 0;
        ++idx[d - 1];
      }
    }
  }

 private:
  uint64_t size_ = 0;
  uint32_t rank_ = 0;
  std::array<uint64_t, kMaxRank> shape_{};
  std::array<std::array<uint64_t, kMaxRank>, K> strides_{};
};

// Operand strides over `out`'s shape for an operand laid out as `t` (same rank): dims where `t`
// has size 1 get stride 0, which broadcasts them.
inline std::array<uint64_t, kMaxRank> BroadcastStrides(const TensorLayout& t) {
  std::array<uint64_t, kMaxRank> s{};
  for (uint32_t d = 0; d < t.rank; ++d) s[d] = t.shape[d] == 1 ? 0 : t.strides[d];
  return s;
}

// Elements per ParallelFor chunk for elementwise work: big enough to amortize the hand-off.
inline constexpr uint64_t kElementwiseGrain = 1 << 14;

}  // namespace cubed::kernels
