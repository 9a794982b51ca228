#pragma once

// CudaContext: the primary context of one CUDA device, retained for the object's lifetime (the
// context CUDA runtime users share, as CubeCL does).

#include <cuda.h>

#include <memory>

#include "absl/status/statusor.h"

namespace cubed {

// Thread-safe: MakeCurrent may be called from any thread.
class CudaContext {
 public:
  // Loads the driver, checks `ordinal` and retains its primary context. FAILED_PRECONDITION
  // saying why when there is no driver, no device or no such ordinal (cuda_driver.h).
  static absl::StatusOr<std::unique_ptr<CudaContext>> Retain(int ordinal);
  // Releases the primary context; the caller has freed everything allocated in it.
  ~CudaContext();

  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  // Makes the context current on the calling thread (one driver call the first time per thread).
  absl::Status MakeCurrent() const;

  CUcontext context() const { return context_; }
  CUdevice device() const { return device_; }
  int ordinal() const { return ordinal_; }

 private:
  CudaContext(int ordinal, CUdevice device, CUcontext context)
      : ordinal_(ordinal), device_(device), context_(context) {}

  int ordinal_;
  CUdevice device_;
  CUcontext context_;
};

}  // namespace cubed
