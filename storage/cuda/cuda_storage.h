#pragma once

// CudaStorage: the ComputeStorage of one CUDA device, on cuMemAlloc / cuMemFree. The pools of
// storage/memory_manager.h sit on top of it, as on the CPU backend.

#include <cuda.h>

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "common/cuda/cuda_context.h"
#include "storage/compute_storage.h"

namespace cubed {

struct CudaStorageOptions {
  const CudaContext* context = nullptr;  // Must outlive the storage.
  // The device's one stream: Dealloc waits for the work queued on it (null: the whole context),
  // and new allocations are zeroed on it (null: not zeroed).
  CUstream stream = nullptr;
  // Told about driver errors in Dealloc, which returns nothing (a sticky one means device lost).
  absl::AnyInvocable<void(absl::Status)> on_error;
};

// Owned by one device's server-loop thread; not thread-safe. The destructor frees every
// allocation still held.
class CudaStorage final : public ComputeStorage {
 public:
  // cuMemAlloc addresses are multiples of 256 bytes, CUDA's documented minimum.
  static constexpr uint64_t kAlignment = 256;

  explicit CudaStorage(CudaStorageOptions options);
  ~CudaStorage() override;

  CudaStorage(const CudaStorage&) = delete;
  CudaStorage& operator=(const CudaStorage&) = delete;

  uint64_t alignment() const override { return kAlignment; }
  // INVALID_ARGUMENT for 0; RESOURCE_EXHAUSTED (with the device's free and total memory) when
  // the device has no memory for it; UNAVAILABLE "device lost: ..." after a sticky error. With a
  // stream, the allocation is zeroed on it (cuMemsetD32Async, no host wait) before any work
  // queued there later: cuMemAlloc promises no zeroed memory and may hand back memory this
  // process freed, another session's bytes (Note [Owner-tagged memory],
  // storage/memory_manager.cc).
  absl::StatusOr<StorageId> Alloc(uint64_t size) override;
  // Waits for the stream's queued work (it may use the memory), then cuMemFree: the memory is
  // back on the device when this returns. Unknown ids are logged and ignored.
  void Dealloc(StorageId id) override;
  // device_ptr and size; NOT_FOUND for an unknown id.
  absl::StatusOr<StorageResource> Resource(StorageId id) const override;
  // New allocations read as zero (in stream order) when the storage has a stream.
  StorageCapabilities capabilities() const override;

  // The 64 bytes of cuIpcGetMemHandle for an allocation (computed once, then cached), which
  // another process opens with cuIpcOpenMemHandle to map the whole allocation. NOT_FOUND for an
  // unknown id; UNIMPLEMENTED when the driver refuses IPC here.
  absl::StatusOr<std::string> IpcHandle(StorageId id);

  // Bytes held now (sum of requested sizes) and number of allocations held now.
  uint64_t bytes_allocated() const { return bytes_allocated_; }
  uint64_t allocation_count() const { return allocations_.size(); }

 private:
  struct Allocation {
    CUdeviceptr ptr = 0;
    uint64_t size = 0;
    std::string ipc_handle;  // Empty until asked for.
  };

  CudaStorageOptions options_;
  uint64_t bytes_allocated_ = 0;
  StorageId next_id_ = 1;
  absl::flat_hash_map<StorageId, Allocation> allocations_;
};

}  // namespace cubed
