#include "server/compute/cuda/cuda_workspace.h"

namespace cubed {

CudaWorkspace::~CudaWorkspace() { Release(); }

absl::StatusOr<CUdeviceptr> CudaWorkspace::Get(uint64_t bytes) {
  if (bytes <= bytes_.load(std::memory_order_relaxed)) return ptr_;
  // Grow to a whole MiB at least, so that a few sizes in a row allocate once.
  const uint64_t grown = (bytes + (uint64_t{1} << 20) - 1) >> 20 << 20;
  Release();
  CU_RETURN_IF_ERROR(Cu().MemAlloc(&ptr_, grown));
  bytes_.store(grown, std::memory_order_relaxed);
  CU_RETURN_IF_ERROR(Cu().MemsetD8Async(ptr_, 0, grown, stream_));
  return ptr_;
}

void CudaWorkspace::Release() {
  if (ptr_ == 0) return;
  Cu().StreamSynchronize(stream_);  // Launches queued before may still use it.
  Cu().MemFree(ptr_);
  ptr_ = 0;
  bytes_.store(0, std::memory_order_relaxed);
}

}  // namespace cubed
