#include "storage/memory_manager.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "storage/exclusive_pool.h"
#include "storage/limited_storage.h"
#include "storage/memory_pool.h"
#include "storage/sliced_pool.h"

// Note [Pool layout]
// The manager stacks, RMM-style, from the bottom up:
//   ComputeStorage (the device)  <-  LimitedStorage (memory_limit)  <-  pools  <-  this facade.
// The pools are chosen by request size, first match wins:
//   size <= 1 MiB   -> SlicedPool with  8 MiB pages (at least 8 slices per page)
//   size <= 16 MiB  -> SlicedPool with 64 MiB pages (at least 4 slices per page)
//   larger          -> ExclusivePool: a page of exactly RoundUp(size, alignment) bytes, reused
//                      for a later request that fits it with at most 1/8 waste.
// So a page is never more than 8 MiB for a <= 1 MiB request or 64 MiB for a <= 16 MiB one, and a
// large request takes about its own size, not a fraction of device memory (CubeCL v0.5's tail
// pool handed a 3 GiB tensor a 1/4-of-VRAM page). Sliced pages are sized so that at the largest
// slice a page holds several, which keeps fragmentation bounded; beyond 16 MiB one device
// allocation per tensor is cheap relative to the work done on it.
//
// The limit: page sizes are capped at memory_limit (rounded down to the alignment) when the
// ladder is built, each level's largest slice is capped at its page, and levels left with the
// same page size merge into one (memory_limit 4 MiB: one pool of 4 MiB pages serves requests up
// to 4 MiB). When a new page would pass the limit, the free pages of every pool are returned first
// (Cleanup) if that makes it fit. If the sliced page still does not fit (or the device refuses
// it), the request falls back to a free slice of a larger pool, else to an exclusive page of just
// its rounded size (a free exclusive page is reused only within 1/8 waste): a small request never
// fails only because a page is bigger than the remaining budget. Free pages are returned only when
// that makes the request fit, so a request that cannot fit anyway fails with Usage() unchanged.
// When the device itself refuses a page (RESOURCE_EXHAUSTED below the limit), free pages are
// returned and it is retried once.
//
// Ids are a 64-bit counter of the manager: never reused, also across Cleanup. Pools name pages by
// 64-bit serials and pointers, never by indices that Cleanup could renumber. Free and Locate ask
// the pools in ladder order (a few hash lookups); Reserve is one best-fit lookup in the pool that
// serves the size when a free slice fits (Note [Sliced pool], Note [Exclusive pool]).

namespace cubed {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

struct SlicedLevel {
  uint64_t page_size;
  uint64_t max_slice_size;
};

// Note [Pool layout].
constexpr SlicedLevel kSlicedLevels[] = {{8 * kMiB, 1 * kMiB}, {64 * kMiB, 16 * kMiB}};

}  // namespace

class MemoryManager::Impl {
 public:
  Impl(ComputeStorage* storage, const MemoryManagerOptions& options)
      : limited_(storage, options.memory_limit),
        alignment_(std::max<uint64_t>(storage->alignment(), 1)),
        exclusive_(&limited_, alignment_) {
    // Note [Pool layout]: pages capped at the limit; levels whose capped pages are equal merge.
    const uint64_t cap = options.memory_limit & ~(alignment_ - 1);
    std::vector<SlicedLevel> levels;
    for (const SlicedLevel& level : kSlicedLevels) {
      const uint64_t page = std::min(level.page_size, cap);
      const uint64_t max_slice = std::min(level.max_slice_size, page);
      if (page == 0) continue;
      if (!levels.empty() && levels.back().page_size == page) {
        levels.back().max_slice_size = std::max(levels.back().max_slice_size, max_slice);
      } else {
        levels.push_back({page, max_slice});
      }
    }
    for (const SlicedLevel& level : levels) {
      sliced_.push_back(std::make_unique<SlicedPool>(&limited_, level.page_size,
                                                     level.max_slice_size, alignment_));
    }
    for (auto& pool : sliced_) pools_.push_back(pool.get());
    pools_.push_back(&exclusive_);
  }

  absl::StatusOr<SliceId> Reserve(uint64_t size);
  void Free(SliceId id);
  absl::StatusOr<SliceLocation> Locate(SliceId id) const;
  MemoryUsage Usage() const;
  void Cleanup();
  uint64_t alignment() const { return alignment_; }

 private:
  MemoryPool* PoolFor(uint64_t size);
  uint64_t FreePageBytes() const;
  // Makes room for `bytes` more under the limit, returning free pages only if that suffices.
  bool MakeRoom(uint64_t bytes);
  // Reserves slice `id` in a new page of `pool`, within the limit (retrying once after Cleanup
  // when the storage refuses). Sets *over_limit when the limit was what refused.
  absl::Status ReserveInNewPage(MemoryPool* pool, SliceId id, uint64_t size, bool* over_limit);

  LimitedStorage limited_;  // Declared before the pools: they return their pages into it.
  uint64_t alignment_;
  ExclusivePool exclusive_;
  std::vector<std::unique_ptr<SlicedPool>> sliced_;  // Ascending max_slice_size.
  std::vector<MemoryPool*> pools_;                   // sliced_..., then &exclusive_.
  SliceId next_id_ = 1;
};

MemoryPool* MemoryManager::Impl::PoolFor(uint64_t size) {
  for (auto& pool : sliced_) {
    if (size <= pool->max_slice_size()) return pool.get();
  }
  return &exclusive_;
}

uint64_t MemoryManager::Impl::FreePageBytes() const {
  uint64_t bytes = 0;
  for (const MemoryPool* pool : pools_) bytes += pool->free_page_bytes();
  return bytes;
}

bool MemoryManager::Impl::MakeRoom(uint64_t bytes) {
  if (bytes <= limited_.bytes_available()) return true;
  if (bytes > limited_.bytes_available() + FreePageBytes()) return false;
  Cleanup();
  return true;
}

absl::Status MemoryManager::Impl::ReserveInNewPage(MemoryPool* pool, SliceId id, uint64_t size,
                                                   bool* over_limit) {
  if (!MakeRoom(pool->NewPageSize(size))) {
    *over_limit = true;
    return absl::ResourceExhaustedError("it would pass the memory limit");
  }
  absl::Status status = pool->ReserveInNewPage(id, size);
  if (absl::IsResourceExhausted(status) && FreePageBytes() > 0) {
    Cleanup();
    status = pool->ReserveInNewPage(id, size);
  }
  return status;
}

absl::StatusOr<SliceId> MemoryManager::Impl::Reserve(uint64_t size) {
  const SliceId id = next_id_;
  MemoryPool* pool = PoolFor(size);
  if (pool->TryReserve(id, size)) return next_id_++;
  bool over_limit = false;
  absl::Status status = ReserveInNewPage(pool, id, size, &over_limit);
  if (!status.ok() && absl::IsResourceExhausted(status) && pool != &exclusive_) {
    // Note [Pool layout]: fall back to free memory of the larger pools, then to an exclusive
    // page of the request's rounded size.
    for (auto it = std::find(pools_.begin(), pools_.end(), pool) + 1; it != pools_.end(); ++it) {
      if ((*it)->TryReserve(id, size)) return next_id_++;
    }
    over_limit = false;
    status = ReserveInNewPage(&exclusive_, id, size, &over_limit);
  }
  if (status.ok()) return next_id_++;
  const MemoryUsage usage = Usage();
  return absl::Status(
      status.code(),
      absl::StrCat("cannot reserve ", size, " bytes: ", status.message(), " (memory_limit ",
                   limited_.limit(), " bytes, ", usage.bytes_reserved, " bytes reserved, ",
                   usage.bytes_in_use, " bytes in use)"));
}

void MemoryManager::Impl::Free(SliceId id) {
  for (MemoryPool* pool : pools_) {
    if (pool->Free(id)) return;
  }
  spdlog::warn("memory manager: Free of unknown slice id {} ignored", id);
}

absl::StatusOr<SliceLocation> MemoryManager::Impl::Locate(SliceId id) const {
  for (const MemoryPool* pool : pools_) {
    if (std::optional<SliceLocation> location = pool->Locate(id)) return *location;
  }
  return absl::NotFoundError(absl::StrCat("unknown slice id ", id));
}

MemoryUsage MemoryManager::Impl::Usage() const {
  MemoryUsage usage;
  for (const MemoryPool* pool : pools_) usage += pool->Usage();
  return usage;
}

void MemoryManager::Impl::Cleanup() {
  for (MemoryPool* pool : pools_) pool->Cleanup();
}

MemoryManager::MemoryManager(ComputeStorage* storage, MemoryManagerOptions options)
    : options_(options), impl_(std::make_unique<Impl>(storage, options_)) {}

MemoryManager::~MemoryManager() = default;

absl::StatusOr<SliceId> MemoryManager::Reserve(uint64_t size) {
  if (size == 0) {
    return absl::InvalidArgumentError("cannot reserve 0 bytes: size must be at least 1");
  }
  if (size > options_.max_allocation) {
    // Can never fit: the same code as any other request over the memory limit.
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot reserve ", size, " bytes: more than max_allocation (", options_.max_allocation,
        " bytes), the largest allocation the memory limit allows"));
  }
  return impl_->Reserve(size);
}

void MemoryManager::Free(SliceId id) { impl_->Free(id); }

absl::StatusOr<SliceLocation> MemoryManager::Locate(SliceId id) const { return impl_->Locate(id); }

MemoryUsage MemoryManager::Usage() const { return impl_->Usage(); }

void MemoryManager::Cleanup() { impl_->Cleanup(); }

uint64_t MemoryManager::alignment() const { return impl_->alignment(); }

}  // namespace cubed
