#pragma once

// ComputeStorage: raw memory of one device (CubeCL's ComputeStorage). Pools sit on top of it
// (memory_manager.h); nothing else allocates device memory.

#include <cstdint>

#include "absl/status/statusor.h"

namespace cubed {

// Identifies one allocation made by a ComputeStorage. Never reused within a storage's lifetime.
using StorageId = uint64_t;

// Where the bytes of a storage allocation live.
struct StorageResource {
  // Host backend: address of the allocation's first byte in this process. CUDA: nullptr.
  uint8_t* host_ptr = nullptr;
  // CUDA backend: CUdeviceptr of the allocation's first byte. Host backend: 0.
  uint64_t device_ptr = 0;
  uint64_t size = 0;  // Bytes of the allocation.
};

// What a storage promises beyond the interface (CONVENTIONS.md §5: a plain struct, not probing).
struct StorageCapabilities {
  // Every new allocation reads as zero until written (host: fresh anonymous pages). The pools
  // then tag new pages kZeroedOwner instead of kUnknownOwner (Note [Owner-tagged memory],
  // memory_manager.cc), so memory never used needs no zeroing.
  bool zeroes_new_allocations = false;
};

// Allocates and frees raw device memory. Owned by one device's server-loop thread; not
// thread-safe.
class ComputeStorage {
 public:
  virtual ~ComputeStorage() = default;

  // Every allocation's address is a multiple of this (bytes, a power of two).
  virtual uint64_t alignment() const = 0;

  // Allocates `size` (> 0) bytes, aligned to alignment(). RESOURCE_EXHAUSTED when the device
  // (or the host) has no memory for it; INVALID_ARGUMENT for 0.
  virtual absl::StatusOr<StorageId> Alloc(uint64_t size) = 0;

  // Frees an allocation. Work already queued on the device that uses it completes first.
  // Unknown ids are a bug and are ignored (logged).
  virtual void Dealloc(StorageId id) = 0;

  // The resource behind an allocation; NOT_FOUND for an unknown id.
  virtual absl::StatusOr<StorageResource> Resource(StorageId id) const = 0;

  // Optional: what this storage promises; nothing by default.
  virtual StorageCapabilities capabilities() const { return {}; }
};

}  // namespace cubed
