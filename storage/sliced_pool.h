#pragma once

// SlicedPool: fixed-size pages carved into aligned slices (Note [Sliced pool] in sliced_pool.cc).

#include <cstdint>
#include <memory>
#include <optional>
#include <tuple>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/memory_usage.h"
#include "storage/compute_storage.h"
#include "storage/memory_pool.h"
#include "storage/slice.h"

namespace cubed {

// Best-fit over every free slice of every page; freed slices merge with free neighbours (their
// owner tags combined); a page whose slices are all free is returned by Cleanup(). Owned by one
// device's server-loop thread; not thread-safe. The destructor returns every page to storage.
class SlicedPool final : public MemoryPool {
 public:
  // `storage` must outlive the pool. `alignment` (a power of two): every slice offset and size is
  // a multiple of it. `page_size` is rounded up to `alignment`; `max_slice_size` is capped at it.
  SlicedPool(ComputeStorage* storage, uint64_t page_size, uint64_t max_slice_size,
             uint64_t alignment);
  ~SlicedPool() override;

  SlicedPool(const SlicedPool&) = delete;
  SlicedPool& operator=(const SlicedPool&) = delete;

  uint64_t page_size() const { return page_size_; }
  uint64_t alignment() const { return alignment_; }
  // Pages held from storage now.
  uint64_t page_count() const { return pages_.size(); }
  // Free slices (after merging) across all pages now.
  uint64_t free_slice_count() const { return free_.size(); }

  uint64_t max_slice_size() const override { return max_slice_size_; }
  uint64_t NewPageSize(uint64_t) const override { return page_size_; }
  std::optional<MemoryOwner> TryReserve(SliceId id, uint64_t size, MemoryOwner owner) override;
  absl::StatusOr<MemoryOwner> ReserveInNewPage(SliceId id, uint64_t size,
                                               MemoryOwner owner) override;
  bool Free(SliceId id) override;
  bool ForgetOwner(SliceId id) override;
  std::optional<SliceLocation> Locate(SliceId id) const override;
  MemoryUsage Usage() const override { return usage_; }
  uint64_t free_page_bytes() const override { return free_page_bytes_; }
  void Cleanup() override;

 private:
  struct Page;
  struct Block;
  // (size, page serial, offset): best fit, then the oldest page, then the lowest offset.
  using FreeKey = std::tuple<uint64_t, uint64_t, uint64_t>;

  static FreeKey KeyOf(const Block* block);
  void InsertFree(Block* block);
  void EraseFree(Block* block);
  // Turns free `block` (already out of free_) into live slice `id` of `size` bytes for `owner`,
  // splitting off the rest as a free block with the block's tag. Returns the block's tag.
  MemoryOwner Carve(Block* block, SliceId id, uint64_t size, MemoryOwner owner);
  uint64_t RoundUp(uint64_t size) const { return (size + alignment_ - 1) & ~(alignment_ - 1); }

  ComputeStorage* storage_;
  uint64_t alignment_;
  uint64_t page_size_;
  uint64_t max_slice_size_;
  uint64_t next_page_serial_ = 0;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Page>> pages_;  // By page serial.
  absl::btree_map<FreeKey, Block*> free_;
  absl::flat_hash_map<SliceId, Block*> live_;
  MemoryUsage usage_;
  uint64_t free_page_bytes_ = 0;
};

}  // namespace cubed
