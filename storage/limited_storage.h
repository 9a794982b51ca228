#pragma once

// LimitedStorage: a ComputeStorage decorator that caps the bytes held from its upstream (RMM's
// limiting_resource_adaptor). The MemoryManager stacks its pools on one to enforce memory_limit.

#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "storage/compute_storage.h"

namespace cubed {

// Ids and resources are the upstream's, unchanged. Owned by one device's server-loop thread; not
// thread-safe. Allocations still held at destruction stay with the upstream.
class LimitedStorage final : public ComputeStorage {
 public:
  // `upstream` must outlive this. `limit`: most bytes held at once.
  LimitedStorage(ComputeStorage* upstream, uint64_t limit);

  uint64_t alignment() const override { return upstream_->alignment(); }
  // RESOURCE_EXHAUSTED (naming the size, the limit and the bytes held) when `size` would pass
  // the limit; otherwise the upstream's result.
  absl::StatusOr<StorageId> Alloc(uint64_t size) override;
  // Unknown ids (not allocated through this) are logged and ignored.
  void Dealloc(StorageId id) override;
  absl::StatusOr<StorageResource> Resource(StorageId id) const override;
  StorageCapabilities capabilities() const override { return upstream_->capabilities(); }

  uint64_t limit() const { return limit_; }
  // Bytes held now through this decorator (requested sizes).
  uint64_t bytes_allocated() const { return bytes_allocated_; }
  // Bytes that may still be allocated before the limit.
  uint64_t bytes_available() const { return limit_ - bytes_allocated_; }

 private:
  ComputeStorage* upstream_;
  uint64_t limit_;
  uint64_t bytes_allocated_ = 0;
  absl::flat_hash_map<StorageId, uint64_t> sizes_;
};

}  // namespace cubed
