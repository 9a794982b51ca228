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

// Note [Owner-tagged memory]
// Memory that changes owner (session) is zeroed before the new owner can see it; memory a session
// gets back from itself is not, so the common case (one session reusing its own memory) costs
// nothing. Every piece of pool memory carries a MemoryOwner tag (slice.h) saying whose bytes it
// holds: a session's serial (unique per device, never reused), kZeroedOwner (known zero) or
// kUnknownOwner (unknown or mixed). The pools keep the tags at no extra cost (no scans):
//   * A live slice is tagged with the owner it was reserved for (it may write anywhere in it).
//   * A freed slice keeps that tag: the bytes are its owner's.
//   * Free neighbours that merge combine their tags (CombineOwners): equal tags stay, a zeroed
//     piece takes the other's tag, anything else becomes unknown.
//   * Carving a slice out of a free block leaves the rest with the block's tag (untouched bytes).
//   * A new page is kZeroedOwner when its storage zeroes new allocations, else kUnknownOwner.
//     HostStorage maps fresh anonymous pages; CudaStorage memsets each new allocation on the
//     device's stream (cuMemAlloc promises nothing and may return memory another session freed
//     to the driver). Both matter for more than the first use: a free rest of unknown content
//     would turn every slice freed next to it unknown, and a session's reuse of its own memory
//     would be zeroed every time.
// Reserve hands out a slice and whether it is dirty: MustZeroFor(tag, owner), i.e. the tag is
// neither kZeroedOwner nor the owner itself (kUnknownOwner is nobody's). A tag covers the slice's
// whole extent, padding included (its owner may read it back through a larger slice later), so a
// dirty slice is zeroed over SliceLocation::extent, not only the requested size. The zeroing is
// the backend's (CpuServer: memset; CudaServer: cuMemsetD32Async on its one stream, so it runs
// after every earlier use of the memory and before every later one, with no host wait): Empty
// zeroes the extent, Create only the bytes its data does not cover. After zeroing the slice holds
// only its owner's bytes, which is what its live tag says; a create that fails before its data
// and zeroing are in place returns the slice with FreeUninitialized, which tags it unknown.
//
// A tag is per free block, so merging loses precision: in a page that several sessions share,
// freed memory soon becomes kUnknownOwner and is zeroed at its next reuse, whoever reuses it.
// Memory that one session keeps reusing stays its own and is never zeroed.

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

  absl::StatusOr<Reservation> Reserve(uint64_t size, MemoryOwner owner);
  void Free(SliceId id);
  void FreeUninitialized(SliceId id);
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
  // when the storage refuses); returns the page's tag. Sets *over_limit when the limit was what
  // refused.
  absl::StatusOr<MemoryOwner> ReserveInNewPage(MemoryPool* pool, SliceId id, uint64_t size,
                                               MemoryOwner owner, bool* over_limit);

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

absl::StatusOr<MemoryOwner> MemoryManager::Impl::ReserveInNewPage(MemoryPool* pool, SliceId id,
                                                                  uint64_t size, MemoryOwner owner,
                                                                  bool* over_limit) {
  if (!MakeRoom(pool->NewPageSize(size))) {
    *over_limit = true;
    return absl::ResourceExhaustedError("it would pass the memory limit");
  }
  absl::StatusOr<MemoryOwner> tag = pool->ReserveInNewPage(id, size, owner);
  if (absl::IsResourceExhausted(tag.status()) && FreePageBytes() > 0) {
    Cleanup();
    tag = pool->ReserveInNewPage(id, size, owner);
  }
  return tag;
}

absl::StatusOr<Reservation> MemoryManager::Impl::Reserve(uint64_t size, MemoryOwner owner) {
  // A slice is written by whoever holds it: its bytes are never known zero once freed.
  if (owner == kZeroedOwner) owner = kUnknownOwner;
  const SliceId id = next_id_;
  // Note [Owner-tagged memory]: the tag of what the slice was carved from decides `dirty`.
  auto reserved = [&](MemoryOwner tag) { return Reservation{next_id_++, MustZeroFor(tag, owner)}; };
  MemoryPool* pool = PoolFor(size);
  if (std::optional<MemoryOwner> tag = pool->TryReserve(id, size, owner)) return reserved(*tag);
  bool over_limit = false;
  absl::StatusOr<MemoryOwner> tag = ReserveInNewPage(pool, id, size, owner, &over_limit);
  if (!tag.ok() && absl::IsResourceExhausted(tag.status()) && pool != &exclusive_) {
    // Note [Pool layout]: fall back to free memory of the larger pools, then to an exclusive
    // page of the request's rounded size.
    for (auto it = std::find(pools_.begin(), pools_.end(), pool) + 1; it != pools_.end(); ++it) {
      if (std::optional<MemoryOwner> t = (*it)->TryReserve(id, size, owner)) return reserved(*t);
    }
    over_limit = false;
    tag = ReserveInNewPage(&exclusive_, id, size, owner, &over_limit);
  }
  if (tag.ok()) return reserved(*tag);
  const absl::Status& status = tag.status();
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

void MemoryManager::Impl::FreeUninitialized(SliceId id) {
  for (MemoryPool* pool : pools_) {
    if (pool->ForgetOwner(id) && pool->Free(id)) return;
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

absl::StatusOr<Reservation> MemoryManager::Reserve(uint64_t size, MemoryOwner owner) {
  if (size == 0) {
    return absl::InvalidArgumentError("cannot reserve 0 bytes: size must be at least 1");
  }
  if (size > options_.max_allocation) {
    // Can never fit: the same code as any other request over the memory limit.
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot reserve ", size, " bytes: more than max_allocation (", options_.max_allocation,
        " bytes), the largest allocation the memory limit allows"));
  }
  return impl_->Reserve(size, owner);
}

void MemoryManager::Free(SliceId id) { impl_->Free(id); }

void MemoryManager::FreeUninitialized(SliceId id) { impl_->FreeUninitialized(id); }

absl::StatusOr<SliceLocation> MemoryManager::Locate(SliceId id) const { return impl_->Locate(id); }

MemoryUsage MemoryManager::Usage() const { return impl_->Usage(); }

void MemoryManager::Cleanup() { impl_->Cleanup(); }

uint64_t MemoryManager::alignment() const { return impl_->alignment(); }

}  // namespace cubed
