#pragma once

// cuBLAS sgemm for the benchmark's baseline, through the project's one cuBLAS loader
// (common/cuda/cublas_api.h), so the benchmark runs on machines without cuBLAS. Uses the current
// CUDA context.

#include <cuda.h>

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "common/cuda/cublas_api.h"

namespace cubed::bench {

class Cublas {
 public:
  // Loads the library and creates a handle bound to `stream`. UNAVAILABLE "cuBLAS not available
  // on this machine: <dlerror>" when no library loads; INTERNAL when a call fails.
  static absl::StatusOr<std::unique_ptr<Cublas>> Load(CUstream stream);
  ~Cublas();

  // Queues row-major C[m,n] = A[m,k] x B[k,n] (f32, no TF32) on the stream.
  absl::Status Sgemm(uint64_t m, uint64_t n, uint64_t k, CUdeviceptr a, CUdeviceptr b,
                     CUdeviceptr c);

 private:
  Cublas() = default;
  const CublasApi* api_ = nullptr;
  CublasHandle handle_ = nullptr;
};

}  // namespace cubed::bench
