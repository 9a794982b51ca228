#include "tests/bench/cublas_loader.h"

#include <dlfcn.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace cubed::bench {

absl::StatusOr<std::unique_ptr<Cublas>> Cublas::Load(CUstream stream) {
  std::unique_ptr<Cublas> b(new Cublas());
  std::string errors;
  for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"}) {
    b->library_ = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (b->library_ != nullptr) break;
    const char* e = dlerror();
    absl::StrAppend(&errors, errors.empty() ? "" : "; ", e ? e : name);
  }
  if (b->library_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cuBLAS not available on this machine: ", errors));
  }
  auto create = reinterpret_cast<CreateFn>(dlsym(b->library_, "cublasCreate_v2"));
  auto set_stream = reinterpret_cast<SetStreamFn>(dlsym(b->library_, "cublasSetStream_v2"));
  b->destroy_ = reinterpret_cast<DestroyFn>(dlsym(b->library_, "cublasDestroy_v2"));
  b->sgemm_ = reinterpret_cast<SgemmFn>(dlsym(b->library_, "cublasSgemm_v2"));
  if (!create || !set_stream || !b->destroy_ || !b->sgemm_) {
    return absl::UnavailableError("cuBLAS not available on this machine: symbols missing");
  }
  if (int s = create(&b->handle_); s != 0) {
    b->handle_ = nullptr;
    return absl::InternalError(absl::StrCat("cublasCreate_v2 returned ", s));
  }
  if (int s = set_stream(b->handle_, stream); s != 0) {
    return absl::InternalError(absl::StrCat("cublasSetStream_v2 returned ", s));
  }
  return b;
}

Cublas::~Cublas() {
  if (handle_ != nullptr) destroy_(handle_);
  // The library stays loaded: cuBLAS registers exit-time cleanup.
}

absl::Status Cublas::Sgemm(uint64_t m, uint64_t n, uint64_t k, CUdeviceptr a, CUdeviceptr b,
                           CUdeviceptr c) {
  constexpr int kOpN = 0;  // CUBLAS_OP_N
  const float alpha = 1.0f, beta = 0.0f;
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  // Column-major view of row-major data: C^T[n,m] = B^T[n,k] x A^T[k,m].
  const int s = sgemm_(handle_, kOpN, kOpN, ni, mi, ki, &alpha, reinterpret_cast<const float*>(b),
                       ni, reinterpret_cast<const float*>(a), ki, &beta,
                       reinterpret_cast<float*>(c), ni);
  if (s != 0) return absl::InternalError(absl::StrCat("cublasSgemm_v2 returned ", s));
  return absl::OkStatus();
}

}  // namespace cubed::bench
