#pragma once

// Builtin matmul through cuBLAS (Note [cuBLAS matmul]): f32 and f64 run as one
// cublas{S,D}gemmStridedBatched, f16 and bf16 as one cublasGemmStridedBatchedEx with f32
// accumulation (CUBLAS_COMPUTE_32F: tensor cores) and output in the input type, on the server's
// stream whenever every matrix has contiguous rows or columns (batch dims that do not flatten to
// one stride per operand become a loop of calls: Note [Outer batch dims] in cublas_matmul.cc);
// anything else (other strides, integer types, empty dims, sizes past cuBLAS's int range, more
// than kMaxCublasCallsPerMatmul calls) stays with the NVRTC kernel.
//
// Note [cuBLAS matmul]: row-major C[M,N] = A[M,K] x B[K,N] is, read column-major,
// C^T[N,M] = B^T[N,K] x A^T[K,M], so when C has contiguous rows cuBLAS gets the operands swapped
// (m = N, n = M); when C has contiguous columns it gets them as they are. An operand with
// contiguous rows in the view cuBLAS needs passes as CUBLAS_OP_N, one with contiguous columns as
// CUBLAS_OP_T. Math mode is CUBLAS_DEFAULT_MATH (no TF32): f32 stays f32 throughout, unless the
// call allows TF32 (BuiltinKernel.allow_tf32): then it is one cublasGemmStridedBatchedEx of f32
// operands with CUBLAS_COMPUTE_32F_FAST_TF32 (tensor cores, f32 accumulation).

#include <cuda.h>

#include <cstdint>
#include <optional>
#include <utility>

#include "absl/status/statusor.h"
#include "common/cuda/cublas_api.h"
#include "common/elem_type.h"
#include "kernels/cuda/builtin_args.h"

namespace cubed {

// Most cuBLAS calls one matmul becomes (Note [Outer batch dims]); more stay with the NVRTC kernel.
inline constexpr uint64_t kMaxCublasCallsPerMatmul = 1024;

// The arguments of the cublas{S,D}gemmStridedBatched calls of one matmul (column-major, cuBLAS's
// names): one call, or one per index of the outer batch dims (Note [Outer batch dims]), each at
// a, b, c advanced by that index's element offsets.
struct CublasGemmPlan {
  int transa = kCublasOpN;
  int transb = kCublasOpN;
  int m = 0, n = 0, k = 0;
  CUdeviceptr a = 0, b = 0, c = 0;
  int lda = 0, ldb = 0, ldc = 0;
  long long stride_a = 0, stride_b = 0, stride_c = 0;  // Elements; 0 broadcasts the operand.
  int batch_count = 0;
  // Outer batch dims, innermost first: their sizes and each of a, b, c's element strides along
  // them (cuBLAS's a, b: after any swap). calls = the product of the sizes (1 with none).
  uint32_t outer_dims = 0;
  uint64_t outer_size[CUBED_CUDA_MAX_RANK] = {};
  uint64_t outer_stride[3][CUBED_CUDA_MAX_RANK] = {};
  uint64_t calls = 1;
};

// The cuBLAS call computing a validated matmul's `args` (MakeCudaBuiltinArgs, pointers set:
// buffers a, b, out), or nullopt when cuBLAS cannot express it (Note [cuBLAS matmul]). Pure.
std::optional<CublasGemmPlan> PlanCublasGemm(const CudaBuiltinArgs& args);

// One server's cuBLAS handle, created at the first matmul cuBLAS can run. Owned by the
// server-loop thread; the server's context must be current for every call.
class CublasMatmul {
 public:
  // `api` null: cuBLAS unavailable or disabled, Run always declines.
  CublasMatmul(const CublasApi* api, CUstream stream) : api_(api), stream_(stream) {}
  // Destroys the handle: the stream must have been synchronized.
  ~CublasMatmul();

  CublasMatmul(const CublasMatmul&) = delete;
  CublasMatmul& operator=(const CublasMatmul&) = delete;

  // True when cuBLAS runs matmuls of `dtype` (f32, f64, f16, bf16), for GetInfo.
  static bool Supports(ElemType dtype);

  // Queues the matmul on the stream through cuBLAS and returns true, or returns false with
  // nothing queued when the caller must run its own kernel: cuBLAS unavailable, a type or layout
  // it cannot express, or a handle that could not be set up (remembered: logged once, never
  // retried). `allow_tf32` (f32 only) lets f32 run on TF32 tensor cores. INTERNAL naming the
  // cuBLAS call when a call that may have queued work fails.
  absl::StatusOr<bool> Run(ElemType dtype, bool allow_tf32, const CudaBuiltinArgs& args);

  // Matmuls queued through cuBLAS so far. For tests.
  uint64_t calls() const { return calls_; }

 private:
  // Creates the handle on the stream; on failure remembers it (api_ = null) and logs once.
  bool EnsureHandle();

  // Queues one strided-batched call of `p` at the operand addresses `ptr` (a, b, c in cuBLAS's
  // order); its status and the cuBLAS function's name.
  std::pair<CublasStatus, const char*> Gemm(ElemType dtype, bool allow_tf32,
                                            const CublasGemmPlan& p,
                                            const CUdeviceptr (&ptr)[3]) const;

  const CublasApi* api_;
  CUstream stream_;
  CublasHandle handle_ = nullptr;
  uint64_t calls_ = 0;
  bool warned_ = false;  // A refused call was logged.
};

}  // namespace cubed
