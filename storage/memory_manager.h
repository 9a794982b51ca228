#pragma once

// MemoryManager: the pools of one device, stacked on its ComputeStorage (see Note [Pool layout]
// in memory_manager.cc). Small and medium requests are carved from sliced pages; large ones get a
// page of their own; every reservation is aligned; a global limit caps bytes reserved.

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "common/memory_usage.h"
#include "storage/compute_storage.h"
#include "storage/slice.h"  // SliceId, SliceLocation.

namespace cubed {

struct MemoryManagerOptions {
  // Most bytes the manager may hold from storage at once (bytes_reserved). Reservations that would
  // pass it even after returning every free page fail with RESOURCE_EXHAUSTED.
  uint64_t memory_limit = uint64_t{1} << 34;
  // Largest single reservation (bytes); Reserve of more is INVALID_ARGUMENT.
  uint64_t max_allocation = uint64_t{1} << 33;
};

// Owned by one device's server-loop thread; not thread-safe.
class MemoryManager {
 public:
  // `storage` must outlive the manager; its alignment() (a power of two) is the manager's.
  MemoryManager(ComputeStorage* storage, MemoryManagerOptions options);
  ~MemoryManager();  // Returns every page to storage.

  MemoryManager(const MemoryManager&) = delete;
  MemoryManager& operator=(const MemoryManager&) = delete;

  // Reserves `size` bytes (1 .. max_allocation). INVALID_ARGUMENT for 0; RESOURCE_EXHAUSTED
  // for more than max_allocation, and (message names the limit, the request and what is
  // reserved) when the limit would be passed even after freeing every free page, or when the
  // storage has no memory even after that. A failed Reserve leaves Usage() exactly as it was,
  // unless the storage itself refused (then free pages were returned to retry). Free pages are
  // returned only when that makes the request fit. O(log n) when a free slice fits.
  // Memory is uninitialized. Safe to reuse a just-freed slice: the device runs one in-order stream.
  absl::StatusOr<SliceId> Reserve(uint64_t size);

  // Returns a slice to its pool. Unknown ids are ignored (logged): callers own their ids.
  void Free(SliceId id);

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
