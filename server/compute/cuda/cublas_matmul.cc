#include "server/compute/cuda/cublas_matmul.h"

#include <climits>
#include <cstdint>
#include <string>
#include <utility>

#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace cubed {
namespace {

// One matrix operand: rows x cols with element strides (0 along a dim of size 1), the address of
// its first batch's element 0 and its batch stride.
struct Matrix {
  uint64_t rows = 0, cols = 0, rs = 0, cs = 0;
  CUdeviceptr ptr = 0;
  uint64_t batch_stride = 0;

  Matrix Transposed() const { return {cols, rows, cs, rs, ptr, batch_stride}; }
};

// How a matrix is handed to cuBLAS: op(S) with S column-major at leading dimension `ld`.
struct Operand {
  int op = kCublasOpN;
  uint64_t ld = 0;
};

bool FitsInt(uint64_t v) { return v <= static_cast<uint64_t>(INT_MAX); }

// Column-major S = X (contiguous columns) as CUBLAS_OP_N, else S = X^T stored column-major
// (contiguous rows) as CUBLAS_OP_T; nullopt when neither, or when the leading dimension would be
// smaller than cuBLAS accepts (overlapping rows or columns).
std::optional<Operand> AsColumnMajor(const Matrix& x) {
  if (x.rs == 1 || x.rows == 1) {
    const uint64_t ld = x.cols > 1 ? x.cs : x.rows;
    if (ld >= x.rows && FitsInt(ld)) return Operand{kCublasOpN, ld};
  }
  if (x.cs == 1 || x.cols == 1) {
    const uint64_t ld = x.rows > 1 ? x.rs : x.cols;
    if (ld >= x.cols && FitsInt(ld)) return Operand{kCublasOpT, ld};
  }
  return std::nullopt;
}

// Column-major C = A x B, or nullopt (C must pass as CUBLAS_OP_N).
std::optional<CublasGemmPlan> PlanColumnMajor(const Matrix& a, const Matrix& b, const Matrix& c,
                                              uint64_t batches) {
  const std::optional<Operand> oa = AsColumnMajor(a), ob = AsColumnMajor(b);
  const std::optional<Operand> oc = AsColumnMajor(c);
  if (!oa || !ob || !oc || oc->op != kCublasOpN) return std::nullopt;
  CublasGemmPlan p;
  p.transa = oa->op;
  p.transb = ob->op;
  p.m = static_cast<int>(c.rows);
  p.n = static_cast<int>(c.cols);
  p.k = static_cast<int>(a.cols);
  p.a = a.ptr;
  p.b = b.ptr;
  p.c = c.ptr;
  p.lda = static_cast<int>(oa->ld);
  p.ldb = static_cast<int>(ob->ld);
  p.ldc = static_cast<int>(oc->ld);
  p.stride_a = static_cast<long long>(a.batch_stride);
  p.stride_b = static_cast<long long>(b.batch_stride);
  p.stride_c = static_cast<long long>(c.batch_stride);
  p.batch_count = static_cast<int>(batches);
  return p;
}

}  // namespace

std::optional<CublasGemmPlan> PlanCublasGemm(const CudaBuiltinArgs& args) {
  if (args.num_buffers != 3) return std::nullopt;
  const CudaTensorArg* t[3] = {&args.buffers[0], &args.buffers[1], &args.buffers[2]};
  const uint32_t rank = t[2]->rank;
  if (rank < 2 || rank > CUBED_CUDA_MAX_RANK) return std::nullopt;
  for (const CudaTensorArg* x : t) {
    if (x->rank != rank) return std::nullopt;
  }
  const uint64_t m = t[2]->shape[rank - 2], n = t[2]->shape[rank - 1];
  const uint64_t k = t[0]->shape[rank - 1];
  // Empty products (zero fill) stay with the NVRTC kernel.
  if (m == 0 || n == 0 || k == 0 || !FitsInt(m) || !FitsInt(n) || !FitsInt(k)) {
    return std::nullopt;
  }

  // Note [Outer batch dims]
  // cuBLAS takes one batch stride per operand, so the batch dims flatten into its batch index
  // while, innermost first, each operand's stride along a dim is its stride along the previous
  // ones times their sizes (0 throughout where it broadcasts). From the first dim that breaks
  // this, the dims are an outer loop: one strided-batched call per outer index, at pointers
  // advanced by that index's offsets (attention's heads of a [batch, seq, heads, head_dim] view
  // transposed to [batch, heads, seq, head_dim]: heads flatten, batch is outer). At most
  // kMaxCublasCallsPerMatmul calls; past that, the NVRTC kernel.
  uint64_t batches = 1;
  uint64_t batch_stride[3] = {0, 0, 0};
  bool first = true;
  uint32_t outer_dims = 0;
  uint64_t outer_size[CUBED_CUDA_MAX_RANK] = {};
  uint64_t outer_stride[3][CUBED_CUDA_MAX_RANK] = {};
  uint64_t calls = 1;
  for (uint32_t d = rank - 2; d-- > 0;) {  // Innermost batch dim first.
    const uint64_t size = t[2]->shape[d];
    if (size == 0) return std::nullopt;
    if (size == 1) continue;
    bool flattens = outer_dims == 0;
    for (int i = 0; i < 3 && flattens && !first; ++i) {
      flattens = t[i]->strides[d] == batch_stride[i] * batches &&
                 (batch_stride[i] == 0 || t[i]->strides[d] / batch_stride[i] == batches);
    }
    if (flattens) {
      if (first) {
        for (int i = 0; i < 3; ++i) batch_stride[i] = t[i]->strides[d];
      }
      first = false;
      batches *= size;
      if (!FitsInt(batches)) return std::nullopt;
      continue;
    }
    if (t[2]->strides[d] == 0) return std::nullopt;  // Outer indices writing one output.
    calls *= size;
    if (calls > kMaxCublasCallsPerMatmul) return std::nullopt;
    outer_size[outer_dims] = size;
    for (int i = 0; i < 3; ++i) outer_stride[i][outer_dims] = t[i]->strides[d];
    ++outer_dims;
  }
  for (uint64_t s : batch_stride) {
    if (s > static_cast<uint64_t>(LLONG_MAX)) return std::nullopt;
  }
  if (batches > 1 && batch_stride[2] == 0) return std::nullopt;  // Batches writing one matrix.

  // Note [Folded batches]
  // A batch of activations times one broadcast weight ([batch, M, K] x [K, N], a linear layer)
  // is one matrix of batch * M rows when a's and c's batches follow each other row after row:
  // one large GEMM instead of a batch of smaller ones, as torch's linear runs it, and a far
  // better choice of cuBLAS kernel (GPT-2's vocabulary projection ran 6x faster folded).
  const uint32_t r = rank - 2, col = rank - 1;
  uint64_t rows = m;
  if (outer_dims == 0 && batches > 1 && batch_stride[1] == 0 && m > 1 &&
      batch_stride[0] == m * t[0]->strides[r] && batch_stride[2] == m * t[2]->strides[r] &&
      t[0]->strides[r] != 0 && FitsInt(m * batches)) {
    rows = m * batches;
    batches = 1;
    batch_stride[0] = batch_stride[2] = 0;
  }
  const Matrix a{rows, k, t[0]->strides[r], t[0]->strides[col], t[0]->ptr, batch_stride[0]};
  const Matrix b{k, n, t[1]->strides[r], t[1]->strides[col], t[1]->ptr, batch_stride[1]};
  const Matrix c{rows, n, t[2]->strides[r], t[2]->strides[col], t[2]->ptr, batch_stride[2]};
  // Contiguous rows of C: C^T = B^T x A^T. Otherwise try C = A x B as it is.
  bool swapped = true;
  std::optional<CublasGemmPlan> p =
      PlanColumnMajor(b.Transposed(), a.Transposed(), c.Transposed(), batches);
  if (!p) {
    swapped = false;
    p = PlanColumnMajor(a, b, c, batches);
  }
  if (!p) return std::nullopt;
  p->outer_dims = outer_dims;
  p->calls = calls;
  for (uint32_t j = 0; j < outer_dims; ++j) {
    p->outer_size[j] = outer_size[j];
    p->outer_stride[0][j] = outer_stride[swapped ? 1 : 0][j];
    p->outer_stride[1][j] = outer_stride[swapped ? 0 : 1][j];
    p->outer_stride[2][j] = outer_stride[2][j];
  }
  return p;
}

CublasMatmul::~CublasMatmul() {
  if (handle_ != nullptr) api_->Destroy(handle_);
}

bool CublasMatmul::EnsureHandle() {
  if (handle_ != nullptr) return true;
  CublasHandle handle = nullptr;
  absl::Status status = CublasToStatus(api_->Create(&handle), "cublasCreate_v2");
  if (status.ok()) {
    status = CublasToStatus(api_->SetStream(handle, stream_), "cublasSetStream_v2");
  }
  if (status.ok()) {
    status = CublasToStatus(api_->SetMathMode(handle, kCublasDefaultMath), "cublasSetMathMode");
  }
  if (status.ok()) {
    handle_ = handle;
    return true;
  }
  if (handle != nullptr) api_->Destroy(handle);
  spdlog::info("{}; builtin matmul uses cubed's own kernel", std::string(status.message()));
  api_ = nullptr;
  return false;
}

bool CublasMatmul::Supports(ElemType dtype) {
  return dtype == ElemType::kF32 || dtype == ElemType::kF64 || IsHalf(dtype);
}

absl::StatusOr<bool> CublasMatmul::Run(ElemType dtype, bool allow_tf32,
                                       const CudaBuiltinArgs& args) {
  if (api_ == nullptr || !Supports(dtype)) return false;
  const std::optional<CublasGemmPlan> p = PlanCublasGemm(args);
  if (!p || !EnsureHandle()) return false;
  const uint64_t es = ElemSize(dtype);
  uint64_t index[CUBED_CUDA_MAX_RANK] = {};  // Of the outer dims, innermost first.
  for (uint64_t call_index = 0; call_index < p->calls; ++call_index) {
    CUdeviceptr ptr[3] = {p->a, p->b, p->c};
    for (uint32_t j = 0; j < p->outer_dims; ++j) {
      for (int i = 0; i < 3; ++i) ptr[i] += index[j] * p->outer_stride[i][j] * es;
    }
    const auto [s, call] = Gemm(dtype, allow_tf32, *p, ptr);
    // Argument checks refuse before anything is queued: the NVRTC kernel runs instead. Every call
    // of a matmul has the same arguments but the pointers, so only the first can be refused.
    if (call_index == 0 &&
        (s == kCublasInvalidValue || s == kCublasNotSupported || s == kCublasArchMismatch)) {
      if (!warned_) {
        spdlog::warn(
            "{} (m={} n={} k={} lda={} ldb={} ldc={} batches={}); this matmul and any "
            "other cuBLAS refuses use cubed's own kernel",
            std::string(CublasToStatus(s, call).message()), p->m, p->n, p->k, p->lda, p->ldb,
            p->ldc, p->batch_count);
        warned_ = true;
      }
      return false;
    }
    RETURN_IF_ERROR(CublasToStatus(s, call));
    for (uint32_t j = 0; j < p->outer_dims && ++index[j] == p->outer_size[j]; ++j) index[j] = 0;
  }
  ++calls_;
  return true;
}

std::pair<CublasStatus, const char*> CublasMatmul::Gemm(ElemType dtype, bool allow_tf32,
                                                        const CublasGemmPlan& p,
                                                        const CUdeviceptr (&ptr)[3]) const {
  const bool tf32 = allow_tf32 && dtype == ElemType::kF32;
  if (IsHalf(dtype) || tf32) {
    const float one = 1.0f, zero = 0.0f;
    const int type = tf32 ? kCudaR32F : dtype == ElemType::kF16 ? kCudaR16F : kCudaR16BF;
    const int compute = tf32 ? kCublasCompute32FFastTf32 : kCublasCompute32F;
    return {
        api_->GemmStridedBatchedEx(handle_, p.transa, p.transb, p.m, p.n, p.k, &one,
                                   reinterpret_cast<const void*>(ptr[0]), type, p.lda, p.stride_a,
                                   reinterpret_cast<const void*>(ptr[1]), type, p.ldb, p.stride_b,
                                   &zero, reinterpret_cast<void*>(ptr[2]), type, p.ldc, p.stride_c,
                                   p.batch_count, compute, kCublasGemmDefault),
        "cublasGemmStridedBatchedEx"};
  }
  if (dtype == ElemType::kF32) {
    const float one = 1.0f, zero = 0.0f;
    return {api_->SgemmStridedBatched(handle_, p.transa, p.transb, p.m, p.n, p.k, &one,
                                      reinterpret_cast<const float*>(ptr[0]), p.lda, p.stride_a,
                                      reinterpret_cast<const float*>(ptr[1]), p.ldb, p.stride_b,
                                      &zero, reinterpret_cast<float*>(ptr[2]), p.ldc, p.stride_c,
                                      p.batch_count),
            "cublasSgemmStridedBatched"};
  }
  const double one = 1.0, zero = 0.0;
  return {api_->DgemmStridedBatched(handle_, p.transa, p.transb, p.m, p.n, p.k, &one,
                                    reinterpret_cast<const double*>(ptr[0]), p.lda, p.stride_a,
                                    reinterpret_cast<const double*>(ptr[1]), p.ldb, p.stride_b,
                                    &zero, reinterpret_cast<double*>(ptr[2]), p.ldc, p.stride_c,
                                    p.batch_count),
          "cublasDgemmStridedBatched"};
}

}  // namespace cubed
