#pragma once

// cuBLAS sgemm loaded with dlopen (libcublas.so.13, .12, then libcublas.so), so the benchmark
// runs on machines without cuBLAS. Uses the current CUDA context.

#include <cuda.h>

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

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
  using CreateFn = int (*)(void**);
  using DestroyFn = int (*)(void*);
  using SetStreamFn = int (*)(void*, CUstream);
  using SgemmFn = int (*)(void*, int, int, int, int, int, const float*, const float*, int,
                          const float*, int, const float*, float*, int);
  void* library_ = nullptr;
  void* handle_ = nullptr;
  DestroyFn destroy_ = nullptr;
  SgemmFn sgemm_ = nullptr;
};

}  // namespace cubed::bench
