#pragma once

// The few cuBLAS entry points the CUDA backend uses, loaded with dlopen at run time
// (libcublas.so.13, then libcublas.so.12): cubed neither links cuBLAS nor needs its headers, and
// runs without it (builtin matmul then uses the NVRTC kernel). The declarations mirror
// cublas_api.h (cuBLAS 12 and 13 share this ABI); cublas_matmul.h decides when cuBLAS runs.

#include <cuda.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cubed {

// cublas_api.h's values, with the same meaning.
using CublasHandle = void*;  // cublasHandle_t.
using CublasStatus = int;    // cublasStatus_t.
inline constexpr CublasStatus kCublasSuccess = 0;
inline constexpr CublasStatus kCublasInvalidValue = 7;
inline constexpr CublasStatus kCublasArchMismatch = 8;
inline constexpr CublasStatus kCublasNotSupported = 15;
inline constexpr int kCublasOpN = 0;          // CUBLAS_OP_N.
inline constexpr int kCublasOpT = 1;          // CUBLAS_OP_T.
inline constexpr int kCublasDefaultMath = 0;  // CUBLAS_DEFAULT_MATH: no TF32, exact f32.
inline constexpr int kCudaR16F = 2;           // CUDA_R_16F (library_types.h).
inline constexpr int kCudaR16BF = 14;         // CUDA_R_16BF.
inline constexpr int kCudaR32F = 0;           // CUDA_R_32F.
inline constexpr int kCublasCompute32F = 68;  // CUBLAS_COMPUTE_32F: f32 accumulation.
// CUBLAS_COMPUTE_32F_FAST_TF32: f32 inputs rounded to TF32 for the tensor cores, f32 accumulation.
inline constexpr int kCublasCompute32FFastTf32 = 77;
inline constexpr int kCublasGemmDefault = -1;  // CUBLAS_GEMM_DEFAULT (tensor cores when they fit).

// One pointer per cuBLAS function, all non-null once loaded.
struct CublasApi {
  CublasStatus (*Create)(CublasHandle*) = nullptr;              // cublasCreate_v2
  CublasStatus (*Destroy)(CublasHandle) = nullptr;              // cublasDestroy_v2
  CublasStatus (*SetStream)(CublasHandle, CUstream) = nullptr;  // cublasSetStream_v2
  CublasStatus (*SetMathMode)(CublasHandle, int) = nullptr;     // cublasSetMathMode
  CublasStatus (*SgemmStridedBatched)(CublasHandle, int transa, int transb, int m, int n, int k,
                                      const float* alpha, const float* a, int lda,
                                      long long stride_a, const float* b, int ldb,
                                      long long stride_b, const float* beta, float* c, int ldc,
                                      long long stride_c, int batch_count) = nullptr;
  CublasStatus (*DgemmStridedBatched)(CublasHandle, int transa, int transb, int m, int n, int k,
                                      const double* alpha, const double* a, int lda,
                                      long long stride_a, const double* b, int ldb,
                                      long long stride_b, const double* beta, double* c, int ldc,
                                      long long stride_c, int batch_count) = nullptr;
  // cublasGemmStridedBatchedEx: typed operands (kCudaR*), alpha/beta in the compute type's scalar.
  CublasStatus (*GemmStridedBatchedEx)(CublasHandle, int transa, int transb, int m, int n, int k,
                                       const void* alpha, const void* a, int a_type, int lda,
                                       long long stride_a, const void* b, int b_type, int ldb,
                                       long long stride_b, const void* beta, void* c, int c_type,
                                       int ldc, long long stride_c, int batch_count,
                                       int compute_type, int algo) = nullptr;
  std::string library;  // The name that loaded, e.g. "libcublas.so.13".
};

// Loads cuBLAS once per process (dlopen + dlsym only: no device work) and returns the table, or
// the same remembered error on every call: UNAVAILABLE "cuBLAS not available: ..." naming each
// library tried (dlerror) or the missing symbol. The first failure is logged once at info level.
// The library stays loaded for the life of the process. Thread-safe.
absl::StatusOr<const CublasApi*> LoadCublas();

// "CUBLAS_STATUS_INVALID_VALUE" etc.; "cublasStatus N" for values it does not know.
std::string CublasStatusName(CublasStatus status);

// OK for kCublasSuccess, else INTERNAL "<call> failed: <status name>".
absl::Status CublasToStatus(CublasStatus status, const char* call);

}  // namespace cubed
