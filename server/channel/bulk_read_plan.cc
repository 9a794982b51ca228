#include "server/channel/bulk_read_plan.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "common/status_macros.h"

namespace cubed {

absl::StatusOr<std::unique_ptr<BulkReadPlan>> BulkReadPlan::Make(std::vector<TensorRef> tensors,
                                                                 uint64_t chunk) {
  std::vector<uint64_t> sizes;
  sizes.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorRef& t = tensors[i];
    ASSIGN_OR_RETURN(const uint64_t bytes,
                     TensorBytes(t.shape, t.elem_size, absl::StrCat("bindings[", i, "]")));
    sizes.push_back(bytes);
  }
  return std::unique_ptr<BulkReadPlan>(
      new BulkReadPlan(std::move(tensors), std::move(sizes), chunk));
}

BulkReadPlan::BulkReadPlan(std::vector<TensorRef> tensors, std::vector<uint64_t> sizes,
                           uint64_t chunk)
    : tensors_(std::move(tensors)), chunk_(std::max<uint64_t>(chunk, 1)), sizes_(std::move(sizes)) {
  StartTensor();
}

void BulkReadPlan::StartTensor() {
  while (t_ < tensors_.size() && sizes_[t_] == 0) ++t_;
  if (t_ >= tensors_.size()) return;
  const TensorRef& t = tensors_[t_];
  const size_t rank = t.shape.size();
  // The outermost dimension whose one index (every inner dimension whole) fits a chunk. No
  // dimension is 0 (sizes_[t_] > 0), so each division is exact.
  uint64_t slab = sizes_[t_];
  d_ = rank - 1;
  for (size_t d = 0; d < rank; ++d) {
    slab /= t.shape[d];  // Bytes of one index of dimension d.
    if (slab <= chunk_) {
      d_ = d;
      break;
    }
  }
  slab_ = slab;
  k_ = std::max<uint64_t>(1, chunk_ / std::max<uint64_t>(slab, 1));
  idx_.assign(d_ + 1, 0);
  offset_ = 0;
}

BulkPiece BulkReadPlan::Next() {
  const TensorRef& t = tensors_[t_];
  BulkPiece p;
  p.binding = static_cast<uint32_t>(t_);
  p.offset = offset_;
  const uint64_t count = std::min(k_, t.shape[d_] - idx_[d_]);
  uint64_t first = 0;  // Elements from the binding's start to the piece's first element.
  for (size_t d = 0; d <= d_; ++d) first += idx_[d] * t.strides[d];
  p.ref = t;
  p.ref.binding.offset_start += first * t.elem_size;
  for (size_t d = 0; d < d_; ++d) p.ref.shape[d] = 1;
  p.ref.shape[d_] = count;
  p.bytes = count * slab_;  // <= sizes_[t_]: count indices of d_, inner dimensions whole.
  offset_ += p.bytes;
  // Advance: along d_, then the outer dimensions odometer style.
  idx_[d_] += count;
  if (idx_[d_] == t.shape[d_]) {
    idx_[d_] = 0;
    size_t d = d_;
    bool carry = true;
    while (carry && d-- > 0) {
      carry = ++idx_[d] == t.shape[d];
      if (carry) idx_[d] = 0;
    }
    if (carry) {  // This tensor is done.
      ++t_;
      StartTensor();
    }
  }
  return p;
}

}  // namespace cubed
