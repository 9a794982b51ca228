#pragma once

// MemoryPool: one pool of pages carved into slices, stacked on a ComputeStorage. The
// MemoryManager composes several of them (Note [Pool layout] in memory_manager.cc), RMM-style:
// a pool only carves pages; the limit lives in LimitedStorage, the ids and the policy in the
// manager.

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/memory_usage.h"
#include "storage/slice.h"

namespace cubed {

// Every free piece of memory is tagged with the owner whose bytes it holds (Note [Owner-tagged
// memory], memory_manager.cc); the tags cost O(1) per operation. Owned by one device's
// server-loop thread; not thread-safe. The destructor returns every page to storage, live slices
// or not.
class MemoryPool {
 public:
  virtual ~MemoryPool() = default;

  // Largest request (bytes) this pool serves.
  virtual uint64_t max_slice_size() const = 0;

  // Bytes a new page for a request of `size` bytes would take from storage.
  virtual uint64_t NewPageSize(uint64_t size) const = 0;

  // Reserves `size` (1 .. max_slice_size()) bytes as slice `id` (not live in this pool) for
  // `owner` (not kZeroedOwner) from memory the pool already holds. Returns the tag of the memory
  // handed out, which the caller compares with `owner` (Note [Owner-tagged memory],
  // memory_manager.cc); nullopt, with nothing changed, when no free memory fits.
  virtual std::optional<MemoryOwner> TryReserve(SliceId id, uint64_t size, MemoryOwner owner) = 0;

  // Reserves `size` (1 .. max_slice_size()) bytes as slice `id` for `owner` (not kZeroedOwner)
  // in a new page of NewPageSize(size) bytes taken from storage. Returns the new page's tag:
  // kZeroedOwner when the storage zeroes new allocations, else kUnknownOwner. The storage's
  // error, with nothing changed, when it refuses; INVALID_ARGUMENT when `size` is out of range.
  virtual absl::StatusOr<MemoryOwner> ReserveInNewPage(SliceId id, uint64_t size,
                                                       MemoryOwner owner) = 0;

  // Frees slice `id`; its memory keeps the tag of the owner it was reserved for. False, with
  // nothing changed, when this pool does not hold it.
  virtual bool Free(SliceId id) = 0;

  // Tags live slice `id` kUnknownOwner, as if reserved for no owner (its owner never initialized
  // it). False when this pool does not hold it.
  virtual bool ForgetOwner(SliceId id) = 0;

  // Where live slice `id` lives; nullopt when this pool does not hold it.
  virtual std::optional<SliceLocation> Locate(SliceId id) const = 0;

  // Exact usage of this pool (O(1)).
  virtual MemoryUsage Usage() const = 0;

  // Bytes that Cleanup() would return to storage now (pages with no live slice).
  virtual uint64_t free_page_bytes() const = 0;

  // Returns every page with no live slice to storage.
  virtual void Cleanup() = 0;
};

}  // namespace cubed
