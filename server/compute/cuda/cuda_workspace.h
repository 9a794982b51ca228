#pragma once

// One reusable block of device memory that builtin launches borrow for scratch (the partials
// and counters of Note [Split reduction], kernels/cuda/builtin_args.h). Every launch that uses it
// is queued on the server's one stream, so one workspace serves them all: a launch may reuse it
// as soon as the one before it was queued.

#include <atomic>
#include <cstdint>

#include "absl/status/statusor.h"
#include "common/cuda/cuda_driver.h"

namespace cubed {

// Owned by the device's server-loop thread; bytes() may be read from any thread. Held outside
// the memory pools and their limit (it is a few MiB at most) but reported in the backend's
// MemoryUsage::bytes_reserved. Needs the context current for Get and Release.
class CudaWorkspace {
 public:
  explicit CudaWorkspace(CUstream stream) : stream_(stream) {}
  ~CudaWorkspace();
  CudaWorkspace(const CudaWorkspace&) = delete;
  CudaWorkspace& operator=(const CudaWorkspace&) = delete;

  // The workspace's device address, grown to at least `bytes` first; memory it grows into is
  // zeroed on the stream before any later launch. Growing waits for the stream (the old block may
  // be in use). Errors are the driver's (CUDA_ERROR_OUT_OF_MEMORY as RESOURCE_EXHAUSTED).
  absl::StatusOr<CUdeviceptr> Get(uint64_t bytes);

  // Frees the memory after the stream has drained (memory_cleanup); the next Get allocates again.
  void Release();

  // The device address held now (0: none); a CUDA graph captured with it is stale once it moved.
  CUdeviceptr pointer() const { return ptr_; }

  // Bytes held now.
  uint64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }

 private:
  CUstream stream_;
  CUdeviceptr ptr_ = 0;
  std::atomic<uint64_t> bytes_{0};
};

}  // namespace cubed
