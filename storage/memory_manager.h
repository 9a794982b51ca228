#pragma once

// MemoryManager: the pools of one device, stacked on its ComputeStorage (see Note [Pool layout]
// in memory_manager.cc). Small and medium requests are carved from sliced pages; large ones get a
// page of their own; every reservation is aligned; a global limit caps bytes reserved.

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "common/memory_usage.h"
#include "storage/compute_storage.h"
#include "storage/slice.h"  // SliceId, SliceLocation, MemoryOwner.

namespace cubed {

struct MemoryManagerOptions {
  // Most bytes the manager may hold from storage at once (bytes_reserved). Reservations that would
  // pass it even after returning every free page fail with RESOURCE_EXHAUSTED.
  uint64_t memory_limit = uint64_t{1} << 34;
  // Largest single reservation (bytes); Reserve of more is INVALID_ARGUMENT.
  uint64_t max_allocation = uint64_t{1} << 33;
};

// A new slice, and whether its memory must be zeroed before its owner may see it (the memory
// held another owner's bytes, or unknown ones: Note [Owner-tagged memory] in memory_manager.cc).
// When `dirty`, the caller zeroes the slice's whole extent (SliceLocation::extent), in stream
// order, before anything can read it; when not, the memory is zero or the owner's own.
struct Reservation {
  SliceId slice = 0;
  bool dirty = true;
};

// Owned by one device's server-loop thread; not thread-safe.
class MemoryManager {
 public:
  // `storage` must outlive the manager; its alignment() (a power of two) is the manager's.
  MemoryManager(ComputeStorage* storage, MemoryManagerOptions options);
  ~MemoryManager();  // Returns every page to storage.

  MemoryManager(const MemoryManager&) = delete;
  MemoryManager& operator=(const MemoryManager&) = delete;

  // Reserves `size` bytes (1 .. max_allocation) for `owner`: a session's tag, or kUnknownOwner
  // (kZeroedOwner counts as it) for memory of no session. INVALID_ARGUMENT for 0;
  // RESOURCE_EXHAUSTED for more than max_allocation, and (message names the limit, the request
  // and what is reserved) when the limit would be passed even after freeing every free page, or
  // when the storage has no memory even after that. A failed Reserve leaves Usage() exactly as it
  // was, unless the storage itself refused (then free pages were returned to retry). Free pages
  // are returned only when that makes the request fit. O(log n) when a free slice fits.
  // The memory is zero or `owner`'s own bytes unless `dirty` (Reservation). Safe to reuse a
  // just-freed slice: the device runs one in-order stream.
  absl::StatusOr<Reservation> Reserve(uint64_t size, MemoryOwner owner);

  // Returns a slice to its pool; its memory stays tagged with the slice's owner. Unknown ids are
  // ignored (logged): callers own their ids.
  void Free(SliceId id);
  // As Free, for a slice its owner did not finish initializing (a create that failed after its
  // reservation, before the data or the zeroing was in place): tagged kUnknownOwner, so that
  // whoever reserves it next gets it zeroed, its former owner too.
  void FreeUninitialized(SliceId id);

  // Where a live slice lives; NOT_FOUND for an unknown id.
  absl::StatusOr<SliceLocation> Locate(SliceId id) const;

  // Exact usage across all pools.
  MemoryUsage Usage() const;

  // Returns every free page to storage; bytes_reserved falls accordingly.
  void Cleanup();

  uint64_t alignment() const;
  const MemoryManagerOptions& options() const { return options_; }

 private:
  class Impl;
  MemoryManagerOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cubed
