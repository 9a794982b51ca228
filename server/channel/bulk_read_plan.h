#pragma once

// BulkReadPlan: how a bulk read (Note [Bulk transfers], server/service/stream/bulk_transfers.h)
// is cut into pieces of at most one chunk, each one sub-tensor the backend reads in one go.

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "server/channel/commands.h"

namespace cubed {

// One piece of a bulk read: dense bytes [offset, offset + bytes) of binding `binding`, read as
// the sub-tensor `ref` (its binding.offset_start moved to the piece's first element).
struct BulkPiece {
  uint32_t binding = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;
  TensorRef ref;
};

// Cuts the tensors of a bulk read (checked by Device::CheckBulkRead) into pieces of at most
// `chunk` bytes, lazily, in dense order: a piece covers whole elements (one element when an
// element is larger than `chunk`) and is one sub-tensor: a run of indices along one dimension,
// with every dimension inside it whole. Pure; not thread-safe.
class BulkReadPlan {
 public:
  // INVALID_ARGUMENT when a tensor's dense size overflows 64 bits (TensorBytes).
  static absl::StatusOr<std::unique_ptr<BulkReadPlan>> Make(std::vector<TensorRef> tensors,
                                                            uint64_t chunk);
  bool done() const { return t_ >= tensors_.size(); }
  // The next piece; only when !done().
  BulkPiece Next();
  // Dense bytes of every tensor, in order.
  const std::vector<uint64_t>& sizes() const { return sizes_; }

 private:
  BulkReadPlan(std::vector<TensorRef> tensors, std::vector<uint64_t> sizes, uint64_t chunk);
  void StartTensor();  // Skips empty tensors; sets d_, slab_, k_, idx_ for tensors_[t_].

  std::vector<TensorRef> tensors_;
  uint64_t chunk_;
  std::vector<uint64_t> sizes_;
  size_t t_ = 0;
  size_t d_ = 0;               // The dimension pieces run along.
  uint64_t slab_ = 0;          // Dense bytes of one index of dimension d_.
  uint64_t k_ = 1;             // Indices of dimension d_ per piece.
  std::vector<uint64_t> idx_;  // Index of dimensions 0 .. d_ of the next piece.
  uint64_t offset_ = 0;        // Dense offset of the next piece in its tensor.
};

}  // namespace cubed
