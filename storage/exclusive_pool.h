#pragma once

// ExclusivePool: one slice per page, for large requests (Note [Exclusive pool] in
// exclusive_pool.cc).

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/memory_usage.h"
#include "storage/compute_storage.h"
#include "storage/memory_pool.h"
#include "storage/slice.h"

namespace cubed {

// Each slice has a page of its own, sized to the request rounded up to the alignment. A freed page
// is kept, with the tag of the owner whose bytes it holds, and reused for a later request that
// fits it with at most 1/8 waste; Cleanup() returns every free page. Owned by one device's
// server-loop thread; not thread-safe. The destructor returns every page to storage.
class ExclusivePool final : public MemoryPool {
 public:
  // `storage` must outlive the pool. `alignment`: a power of two.
  ExclusivePool(ComputeStorage* storage, uint64_t alignment);
  ~ExclusivePool() override;

  ExclusivePool(const ExclusivePool&) = delete;
  ExclusivePool& operator=(const ExclusivePool&) = delete;

  // Pages held from storage now, and those of them with no live slice.
  uint64_t page_count() const { return pages_.size(); }
  uint64_t free_page_count() const { return free_.size(); }

  // A reused page's size exceeds the rounded request by at most this fraction (1/kMaxWasteDivisor).
  static constexpr uint64_t kMaxWasteDivisor = 8;

  uint64_t max_slice_size() const override { return max_slice_size_; }
  // The request rounded up to the alignment.
  uint64_t NewPageSize(uint64_t size) const override;
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
  struct Page {
    StorageId storage = 0;
    uint64_t serial = 0;
    uint64_t size = 0;       // Bytes taken from storage.
    SliceId id = 0;          // Live pages only.
    uint64_t requested = 0;  // Live pages only.
    // Live: the owner it was reserved for. Free: whose bytes it holds (Note [Owner-tagged
    // memory], memory_manager.cc).
    MemoryOwner owner = kUnknownOwner;
  };
  // (page size, serial): smallest fitting page first, then the oldest.
  using FreeKey = std::pair<uint64_t, uint64_t>;

  // Makes `page` live slice `id` of `size` bytes for `owner`; returns the page's previous tag.
  MemoryOwner Assign(Page* page, SliceId id, uint64_t size, MemoryOwner owner);

  ComputeStorage* storage_;
  uint64_t alignment_;
  uint64_t max_slice_size_;
  uint64_t next_page_serial_ = 0;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Page>> pages_;  // By serial.
  absl::btree_map<FreeKey, Page*> free_;
  absl::flat_hash_map<SliceId, Page*> live_;
  MemoryUsage usage_;
  uint64_t free_page_bytes_ = 0;
};

}  // namespace cubed
