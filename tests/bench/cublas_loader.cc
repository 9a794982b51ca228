#include "tests/bench/cublas_loader.h"

#include "absl/status/status.h"
#include "common/status_macros.h"

namespace cubed::bench {

absl::StatusOr<std::unique_ptr<Cublas>> Cublas::Load(CUstream stream) {
  std::unique_ptr<Cublas> b(new Cublas());
  ASSIGN_OR_RETURN(b->api_, LoadCublas());
  if (absl::Status s = CublasToStatus(b->api_->Create(&b->handle_), "cublasCreate_v2"); !s.ok()) {
    b->handle_ = nullptr;
    return s;
  }
  RETURN_IF_ERROR(CublasToStatus(b->api_->SetStream(b->handle_, stream), "cublasSetStream_v2"));
  RETURN_IF_ERROR(
      CublasToStatus(b->api_->SetMathMode(b->handle_, kCublasDefaultMath), "cublasSetMathMode"));
  return b;
}

Cublas::~Cublas() {
  if (handle_ != nullptr) api_->Destroy(handle_);
}

absl::Status Cublas::Sgemm(uint64_t m, uint64_t n, uint64_t k, CUdeviceptr a, CUdeviceptr b,
                           CUdeviceptr c) {
  const float alpha = 1.0f, beta = 0.0f;
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  // Column-major view of row-major data: C^T[n,m] = B^T[n,k] x A^T[k,m]; one batch.
  return CublasToStatus(api_->SgemmStridedBatched(handle_, kCublasOpN, kCublasOpN, ni, mi, ki,
                                                  &alpha, reinterpret_cast<const float*>(b), ni, 0,
                                                  reinterpret_cast<const float*>(a), ki, 0, &beta,
                                                  reinterpret_cast<float*>(c), ni, 0, 1),
                        "cublasSgemmStridedBatched");
}

}  // namespace cubed::bench
