#pragma once

// HostStorage: a ComputeStorage in this process's memory, for the CPU backend and tests.

#include <cstdint>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "storage/compute_storage.h"

namespace cubed {

struct HostStorageOptions {
  // Every allocation's address is a multiple of this (bytes; a power of two, at least 64).
  // Allocations of 4096 bytes or more are also page aligned (4096 or the system's page size).
  uint64_t alignment = 64;
  // Most bytes held at once, like a device's memory size; allocations past it are
  // RESOURCE_EXHAUSTED. Counts requested bytes.
  uint64_t capacity = std::numeric_limits<uint64_t>::max();
};

// Allocations of at least one system page are anonymous mappings (mmap): their pages read as
// zero until written, and Dealloc returns them to the system (munmap). Smaller ones come from
// the heap (posix_memalign) and are zeroed, so every new allocation reads as zero
// (capabilities().zeroes_new_allocations). Owned by one device's server-loop thread; not
// thread-safe. The destructor frees every allocation still held.
class HostStorage final : public ComputeStorage {
 public:
  // An alignment that is not a power of two or is below 64 is raised to the next power of two
  // that is at least 64.
  explicit HostStorage(HostStorageOptions options = {});
  ~HostStorage() override;

  HostStorage(const HostStorage&) = delete;
  HostStorage& operator=(const HostStorage&) = delete;

  uint64_t alignment() const override { return alignment_; }
  // INVALID_ARGUMENT for 0; RESOURCE_EXHAUSTED past the capacity or when the system refuses.
  absl::StatusOr<StorageId> Alloc(uint64_t size) override;
  // Frees at once (the host has no queued work). Unknown ids are logged and ignored.
  void Dealloc(StorageId id) override;
  // host_ptr and size of the allocation; NOT_FOUND for an unknown id.
  absl::StatusOr<StorageResource> Resource(StorageId id) const override;
  // New allocations read as zero.
  StorageCapabilities capabilities() const override;

  // Bytes held now (sum of requested sizes) and number of allocations held now.
  uint64_t bytes_allocated() const { return bytes_allocated_; }
  uint64_t allocation_count() const { return allocations_.size(); }

 private:
  struct Allocation {
    uint8_t* ptr = nullptr;
    uint64_t size = 0;
    uint64_t mapped = 0;  // Bytes mapped at ptr (mmap); 0 for a heap allocation.
  };

  static void Release(const Allocation& allocation);

  uint64_t alignment_;
  uint64_t capacity_;
  uint64_t bytes_allocated_ = 0;
  StorageId next_id_ = 1;
  absl::flat_hash_map<StorageId, Allocation> allocations_;
};

}  // namespace cubed
