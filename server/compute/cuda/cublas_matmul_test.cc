// Builtin matmul through cuBLAS: the layout planning (no GPU needed) and, on a GPU, results
// against the CPU backend with cuBLAS on and with CUBED_DISABLE_CUBLAS=1 (the NVRTC kernel).

#include "server/compute/cuda/cublas_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/cuda/cublas_api.h"
#include "common/half.h"
#include "common/kernel_metadata.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/compute/cpu/cpu_server.h"
#include "server/compute/cuda/cuda_test_util.h"

#if __has_include(<cublas_api.h>)
#include <cublas_api.h>
// The values cublas_api.h declares must be the ones cubed passes.
static_assert(CUBLAS_STATUS_SUCCESS == cubed::kCublasSuccess);
static_assert(CUBLAS_STATUS_INVALID_VALUE == cubed::kCublasInvalidValue);
static_assert(CUBLAS_STATUS_ARCH_MISMATCH == cubed::kCublasArchMismatch);
static_assert(CUBLAS_STATUS_NOT_SUPPORTED == cubed::kCublasNotSupported);
static_assert(CUBLAS_OP_N == cubed::kCublasOpN && CUBLAS_OP_T == cubed::kCublasOpT);
static_assert(CUBLAS_DEFAULT_MATH == cubed::kCublasDefaultMath);
#endif

namespace cubed {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

// ---- Planning (no device) ----

CudaTensorArg Tensor(std::vector<uint64_t> shape, std::vector<uint64_t> strides, CUdeviceptr ptr) {
  CudaTensorArg t;
  std::memset(&t, 0, sizeof(t));
  t.rank = static_cast<uint32_t>(shape.size());
  t.ptr = ptr;
  for (size_t d = 0; d < shape.size(); ++d) {
    t.shape[d] = shape[d];
    t.strides[d] = shape[d] == 1 ? 0 : strides[d];  // As MakeCudaBuiltinArgs sets them.
  }
  return t;
}

std::vector<uint64_t> DenseStrides(const std::vector<uint64_t>& shape) {
  std::vector<uint64_t> s(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
  return s;
}

constexpr CUdeviceptr kA = 0x1000, kB = 0x2000, kC = 0x3000;

CudaBuiltinArgs Args(const std::vector<uint64_t>& a_shape, std::vector<uint64_t> a_strides,
                     const std::vector<uint64_t>& b_shape, std::vector<uint64_t> b_strides,
                     const std::vector<uint64_t>& c_shape, std::vector<uint64_t> c_strides = {}) {
  if (a_strides.empty()) a_strides = DenseStrides(a_shape);
  if (b_strides.empty()) b_strides = DenseStrides(b_shape);
  if (c_strides.empty()) c_strides = DenseStrides(c_shape);
  CudaBuiltinArgs args;
  std::memset(&args, 0, sizeof(args));
  args.num_buffers = 3;
  args.buffers[0] = Tensor(a_shape, a_strides, kA);
  args.buffers[1] = Tensor(b_shape, b_strides, kB);
  args.buffers[2] = Tensor(c_shape, c_strides, kC);
  return args;
}

TEST(PlanCublasGemmTest, RowMajorSwapsTheOperands) {
  const auto p = PlanCublasGemm(Args({3, 5}, {}, {5, 7}, {}, {3, 7}));
  ASSERT_TRUE(p.has_value());
  // C^T[7,3] = B^T[7,5] x A^T[5,3], every matrix as stored.
  EXPECT_EQ(p->transa, kCublasOpN);
  EXPECT_EQ(p->transb, kCublasOpN);
  EXPECT_EQ(p->m, 7);
  EXPECT_EQ(p->n, 3);
  EXPECT_EQ(p->k, 5);
  EXPECT_EQ(p->a, kB);
  EXPECT_EQ(p->lda, 7);
  EXPECT_EQ(p->b, kA);
  EXPECT_EQ(p->ldb, 5);
  EXPECT_EQ(p->c, kC);
  EXPECT_EQ(p->ldc, 7);
  EXPECT_EQ(p->batch_count, 1);
}

TEST(PlanCublasGemmTest, BatchDimsFlattenToOneStride) {
  const auto p = PlanCublasGemm(Args({2, 3, 64, 33}, {}, {2, 3, 33, 17}, {}, {2, 3, 64, 17}));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->batch_count, 6);
  EXPECT_EQ(p->stride_a, 33 * 17);  // cuBLAS's A is our b.
  EXPECT_EQ(p->stride_b, 64 * 33);
  EXPECT_EQ(p->stride_c, 64 * 17);
}

// Note [Outer batch dims]: attention's q [batch 2, heads 3, seq 16, head_dim 8], a view of a
// [2, 16, 3 * 3 * 8] qkv projection, times k^T: the heads flatten, the batch is a loop of calls.
TEST(PlanCublasGemmTest, OuterBatchDimsBecomeALoopOfCalls) {
  const uint64_t row = 72;  // The qkv row: 3 projections of 3 heads of 8.
  const auto p = PlanCublasGemm(Args({2, 3, 16, 8}, {16 * row, 8, row, 1}, {2, 3, 8, 16},
                                     {16 * row, 8, 1, row}, {2, 3, 16, 16}));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->batch_count, 3);
  EXPECT_EQ(p->calls, 2u);
  ASSERT_EQ(p->outer_dims, 1u);
  EXPECT_EQ(p->outer_size[0], 2u);
  EXPECT_EQ(p->stride_a, 8);  // cuBLAS's a is our b (k^T): a head apart.
  EXPECT_EQ(p->stride_b, 8);
  EXPECT_EQ(p->stride_c, 256);
  EXPECT_EQ(p->outer_stride[0][0], 16 * row);  // Swapped with the operands.
  EXPECT_EQ(p->outer_stride[1][0], 16 * row);
  EXPECT_EQ(p->outer_stride[2][0], 3 * 256u);
  EXPECT_EQ(p->lda, static_cast<int>(row));
  EXPECT_EQ(p->transa, kCublasOpT);  // k^T's columns are contiguous.

  // a broadcasts the inner batch dim only: the outer one loops, four calls.
  const auto q = PlanCublasGemm(Args({4, 1, 8, 8}, {}, {4, 3, 8, 8}, {}, {4, 3, 8, 8}));
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->batch_count, 3);
  EXPECT_EQ(q->calls, 4u);
  EXPECT_EQ(q->stride_b, 0);  // Our a, broadcast along the heads.
  EXPECT_EQ(q->outer_stride[1][0], 64u);

  // Batch dims padded apart: two dims outer after the first breaks, calls multiply.
  const auto r = PlanCublasGemm(
      Args({2, 5, 3, 4, 4}, {1000, 100, 16, 4, 1}, {2, 5, 3, 4, 4}, {}, {2, 5, 3, 4, 4}));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->batch_count, 3);
  EXPECT_EQ(r->calls, 10u);
  EXPECT_EQ(r->outer_dims, 2u);
  EXPECT_EQ(r->outer_stride[1][0], 100u);
  EXPECT_EQ(r->outer_stride[1][1], 1000u);
}

TEST(PlanCublasGemmTest, BroadcastBatchHasStrideZero) {
  const auto p = PlanCublasGemm(Args({1, 8, 8}, {}, {4, 8, 8}, {}, {4, 8, 8}));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->batch_count, 4);
  EXPECT_EQ(p->stride_b, 0);  // Our a.
  EXPECT_EQ(p->stride_a, 64);
}

// Note [Folded batches]: activations [4, 8, 5] times a broadcast weight [5, 3] are one
// [32, 5] x [5, 3] product; a weight that varies, or batches apart, keep the batch.
TEST(PlanCublasGemmTest, BroadcastWeightFoldsTheBatchIntoRows) {
  const auto p = PlanCublasGemm(Args({4, 8, 5}, {}, {1, 5, 3}, {}, {4, 8, 3}));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->batch_count, 1);
  EXPECT_EQ(p->n, 32);  // cuBLAS's n: our rows (C^T = B^T x A^T).
  EXPECT_EQ(p->m, 3);
  EXPECT_EQ(p->stride_a, 0);
  EXPECT_EQ(p->stride_b, 0);
  EXPECT_EQ(p->stride_c, 0);
  const auto varying = PlanCublasGemm(Args({4, 8, 5}, {}, {4, 5, 3}, {}, {4, 8, 3}));
  ASSERT_TRUE(varying.has_value());
  EXPECT_EQ(varying->batch_count, 4);
  const auto padded =
      PlanCublasGemm(Args({4, 8, 5}, {48, 5, 1}, {1, 5, 3}, {}, {4, 8, 3}));  // a's batches apart.
  ASSERT_TRUE(padded.has_value());
  EXPECT_EQ(padded->batch_count, 4);
  EXPECT_EQ(padded->stride_b, 48);
}

TEST(PlanCublasGemmTest, TransposedInputsPassAsOpT) {
  // a [3,5] and b [5,7] stored column-major.
  const auto p = PlanCublasGemm(Args({3, 5}, {1, 3}, {5, 7}, {1, 5}, {3, 7}));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->transa, kCublasOpT);
  EXPECT_EQ(p->lda, 5);
  EXPECT_EQ(p->transb, kCublasOpT);
  EXPECT_EQ(p->ldb, 3);
}

TEST(PlanCublasGemmTest, ColumnMajorOutputKeepsTheOperandOrder) {
  const auto p = PlanCublasGemm(Args({3, 5}, {}, {5, 7}, {}, {3, 7}, {1, 3}));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->m, 3);
  EXPECT_EQ(p->n, 7);
  EXPECT_EQ(p->a, kA);
  EXPECT_EQ(p->transa, kCublasOpT);
  EXPECT_EQ(p->lda, 5);
  EXPECT_EQ(p->b, kB);
  EXPECT_EQ(p->transb, kCublasOpT);
  EXPECT_EQ(p->ldb, 7);
  EXPECT_EQ(p->ldc, 3);
}

TEST(PlanCublasGemmTest, PitchedRowsBecomeTheLeadingDimension) {
  // f32 rows padded to 256 bytes (64 elements), as CudaServer::EmptyTensor lays them out.
  const auto p = PlanCublasGemm(Args({2, 5, 33}, {5 * 64, 64, 1}, {2, 33, 17}, {33 * 64, 64, 1},
                                     {2, 5, 17}, {5 * 64, 64, 1}));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->lda, 64);
  EXPECT_EQ(p->ldb, 64);
  EXPECT_EQ(p->ldc, 64);
  EXPECT_EQ(p->stride_a, 33 * 64);
  EXPECT_EQ(p->stride_b, 5 * 64);
  EXPECT_EQ(p->stride_c, 5 * 64);
  EXPECT_EQ(p->batch_count, 2);
}

TEST(PlanCublasGemmTest, VectorsNeedNoLeadingDimension) {
  // [1,5] x [5,1]: sizes of 1 have stride 0, any leading dimension works.
  const auto p = PlanCublasGemm(Args({1, 5}, {}, {5, 1}, {}, {1, 1}));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->m, 1);
  EXPECT_EQ(p->n, 1);
  EXPECT_EQ(p->k, 5);
  EXPECT_GE(p->lda, 1);
  EXPECT_GE(p->ldb, 5);
  EXPECT_GE(p->ldc, 1);
}

TEST(PlanCublasGemmTest, InexpressibleLayoutsAreDeclined) {
  // Neither rows nor columns contiguous.
  EXPECT_FALSE(PlanCublasGemm(Args({3, 5}, {10, 2}, {5, 7}, {}, {3, 7})).has_value());
  // Rows overlap (leading dimension below the row length).
  EXPECT_FALSE(PlanCublasGemm(Args({3, 5}, {2, 1}, {5, 7}, {}, {3, 7})).has_value());
  // Output neither row- nor column-contiguous.
  EXPECT_FALSE(PlanCublasGemm(Args({3, 5}, {}, {5, 7}, {}, {3, 7}, {14, 2})).has_value());
  // More outer batch indices than kMaxCublasCallsPerMatmul (Note [Outer batch dims]).
  EXPECT_FALSE(
      PlanCublasGemm(Args({1025, 1, 2, 2}, {}, {1025, 3, 2, 2}, {}, {1025, 3, 2, 2})).has_value());
  // Every batch writing one output matrix.
  EXPECT_FALSE(
      PlanCublasGemm(Args({4, 8, 8}, {}, {4, 8, 8}, {}, {4, 8, 8}, {0, 8, 1})).has_value());
  // Empty dims stay with the NVRTC kernel.
  EXPECT_FALSE(PlanCublasGemm(Args({3, 0}, {}, {0, 7}, {}, {3, 7})).has_value());
  EXPECT_FALSE(PlanCublasGemm(Args({0, 3, 5}, {}, {0, 5, 7}, {}, {0, 3, 7})).has_value());
  // Past cuBLAS's int sizes.
  EXPECT_FALSE(PlanCublasGemm(Args({uint64_t{1} << 31, 2}, {}, {2, 1}, {}, {uint64_t{1} << 31, 1}))
                   .has_value());
}

TEST(CublasMatmulTest, WithoutCublasEveryMatmulIsDeclined) {
  CublasMatmul none(nullptr, nullptr);
  absl::StatusOr<bool> ran = none.Run(ElemType::kF32, false, Args({3, 5}, {}, {5, 7}, {}, {3, 7}));
  ASSERT_TRUE(ran.ok()) << ran.status();
  EXPECT_FALSE(*ran);
  EXPECT_EQ(none.calls(), 0u);
}

TEST(CublasApiTest, StatusErrorsNameTheCallAndTheStatus) {
  EXPECT_TRUE(CublasToStatus(kCublasSuccess, "cublasCreate_v2").ok());
  const absl::Status s = CublasToStatus(13, "cublasSgemmStridedBatched");
  EXPECT_TRUE(absl::IsInternal(s));
  EXPECT_THAT(std::string(s.message()), HasSubstr("cublasSgemmStridedBatched"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("CUBLAS_STATUS_EXECUTION_FAILED"));
  EXPECT_EQ(CublasStatusName(99), "cublasStatus 99");
}

TEST(CublasApiTest, LoadingIsRememberedAndCompleteOrUnavailable) {
  absl::StatusOr<const CublasApi*> first = LoadCublas();
  absl::StatusOr<const CublasApi*> second = LoadCublas();
  ASSERT_EQ(first.ok(), second.ok());
  if (!first.ok()) {
    EXPECT_TRUE(absl::IsUnavailable(first.status())) << first.status();
    EXPECT_THAT(std::string(first.status().message()), HasSubstr("libcublas.so.12"));
    EXPECT_EQ(first.status(), second.status());
    return;
  }
  EXPECT_EQ(*first, *second);
  const CublasApi& api = **first;
  EXPECT_THAT(api.library, HasSubstr("libcublas.so.1"));
  EXPECT_NE(api.Create, nullptr);
  EXPECT_NE(api.Destroy, nullptr);
  EXPECT_NE(api.SetStream, nullptr);
  EXPECT_NE(api.SetMathMode, nullptr);
  EXPECT_NE(api.SgemmStridedBatched, nullptr);
  EXPECT_NE(api.DgemmStridedBatched, nullptr);
}

// ---- Results against the CPU backend (GPU only) ----

struct Operand {
  std::vector<uint64_t> shape;
  std::vector<uint64_t> strides;  // Empty: dense.
  bool pitched = false;           // Inputs made with CreateTensor, the output with EmptyTensor.

  TensorLayout Layout() const {
    TensorLayout t = TensorLayout::Contiguous(shape);
    for (size_t d = 0; d < strides.size(); ++d) t.strides[d] = strides[d];
    return t;
  }
};

struct MatmulCase {
  std::string name;
  ElemType type;
  Operand a, b, c;
  bool cublas_expressible = true;
  bool tf32 = false;  // f32 with BuiltinKernel.allow_tf32: TF32 tensor cores through cuBLAS.
};

void PrintTo(const MatmulCase& c, std::ostream* os) { *os << c.name; }

// Writes `v` as one element of `type` at `p` (floats rounded to nearest, integers as i32).
void PutElement(char* p, ElemType type, double v) {
  if (type == ElemType::kF32) {
    const float f = static_cast<float>(v);
    std::memcpy(p, &f, 4);
  } else if (type == ElemType::kF64) {
    std::memcpy(p, &v, 8);
  } else if (type == ElemType::kF16) {
    const uint16_t h = Half(v).bits;
    std::memcpy(p, &h, 2);
  } else if (type == ElemType::kBF16) {
    const uint16_t h = BFloat16(v).bits;
    std::memcpy(p, &h, 2);
  } else {
    const int32_t x = static_cast<int32_t>(v);
    std::memcpy(p, &x, 4);
  }
}

std::string RandomBuffer(uint64_t elems, ElemType type, std::mt19937& rng) {
  std::string bytes(elems * ElemSize(type), '\0');
  std::uniform_real_distribution<double> real(-1.0, 1.0);
  std::uniform_int_distribution<int32_t> integer(-50, 50);
  for (uint64_t i = 0; i < elems; ++i) {
    char* p = bytes.data() + i * ElemSize(type);
    PutElement(p, type, IsFloat(type) ? real(rng) : integer(rng));
  }
  return bytes;
}

double Element(const std::string& bytes, uint64_t i, ElemType type) {
  const char* p = bytes.data() + i * ElemSize(type);
  if (type == ElemType::kF32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  if (type == ElemType::kF64) {
    double d;
    std::memcpy(&d, p, 8);
    return d;
  }
  if (IsHalf(type)) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return type == ElemType::kF16 ? static_cast<float>(Half::FromBits(h))
                                  : static_cast<float>(BFloat16::FromBits(h));
  }
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The elements of `layout` in `bytes`, in row-major logical order.
std::vector<double> Gather(const std::string& bytes, const TensorLayout& layout, ElemType type) {
  std::vector<double> out;
  const uint64_t n = layout.NumElements();
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t rest = i, offset = 0;
    for (uint32_t d = layout.rank; d-- > 0;) {
      offset += rest % layout.shape[d] * layout.strides[d];
      rest /= layout.shape[d];
    }
    out.push_back(Element(bytes, offset, type));
  }
  return out;
}

absl::Span<const uint8_t> Bytes(const std::string& s) {
  return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

// Runs the matmul on `server` and returns the output's elements in logical order. Inputs are
// `data` laid out per operand (for pitched operands: dense, the server picks the layout).
absl::StatusOr<std::vector<double>> RunMatmul(ComputeServer& server, const MatmulCase& mc,
                                              const std::string data[2], bool use_pitch) {
  const Operand* ops[3] = {&mc.a, &mc.b, &mc.c};
  const uint32_t es = ElemSize(mc.type);
  std::vector<uint64_t> lens;
  std::vector<TensorLayout> layouts;
  Launch launch;
  std::vector<SliceId> slices;
  absl::Status status;
  const MemoryOwner owner = testing_cuda::kTestOwner;
  for (int i = 0; i < 3 && status.ok(); ++i) {
    const bool pitched = use_pitch && ops[i]->pitched;
    TensorLayout layout = ops[i]->Layout();
    absl::StatusOr<Allocation> a =
        pitched ? (i < 2 ? server.CreateTensor(Bytes(data[i]), ops[i]->shape, es, owner)
                         : server.EmptyTensor(ops[i]->shape, es, owner))
                : (i < 2 ? server.Create(Bytes(data[i]), owner)
                         : server.Empty(layout.SpanElements() * es, owner));
    if (!a.ok()) {
      status = a.status();
      break;
    }
    if (pitched) {
      if (a->strides.size() != layout.rank || a->strides[layout.rank - 2] == layout.shape.back()) {
        status = absl::InternalError(absl::StrCat("operand ", i, " was not pitched"));
      }
      for (uint32_t d = 0; d < layout.rank && d < a->strides.size(); ++d) {
        layout.strides[d] = a->strides[d];
      }
    }
    slices.push_back(a->slice);
    launch.buffers.push_back({a->slice, 0, a->size});
    lens.push_back(a->size / es);
    layouts.push_back(layout);
  }
  std::vector<double> out;
  if (status.ok()) {
    launch.kernel.builtin.name = "matmul";
    launch.kernel.builtin.dtype = mc.type;
    launch.kernel.builtin.allow_tf32 = mc.tf32;
    absl::StatusOr<std::vector<uint32_t>> metadata = EncodeKernelMetadata(lens, layouts);
    status = metadata.status();
    if (status.ok())
      launch.kernel.builtin.metadata = kernels::ToMetadataWords(*std::move(metadata));
  }
  if (status.ok()) status = server.Execute(launch);
  if (status.ok()) {
    absl::StatusOr<std::vector<std::string>> read =
        testing_cuda::ReadAll(server, {launch.buffers.back()});
    status = read.status();
    if (status.ok()) out = Gather((*read)[0], layouts.back(), mc.type);
  }
  for (SliceId s : slices) server.Free(s);
  if (!status.ok()) return status;
  return out;
}

class CublasMatmulGpuTest : public ::testing::TestWithParam<MatmulCase> {
 protected:
  static void SetUpTestSuite() {
    if (!testing_cuda::CudaDevicePresent()) return;
    cpu_ = new CpuServer(CpuServerOptions{});
    gpu_ = testing_cuda::MakeCudaServer(uint64_t{1} << 30).release();
    setenv("CUBED_DISABLE_CUBLAS", "1", 1);
    nvrtc_ = testing_cuda::MakeCudaServer(uint64_t{1} << 30).release();
    unsetenv("CUBED_DISABLE_CUBLAS");
  }
  static void TearDownTestSuite() {
    delete nvrtc_;
    delete gpu_;
    delete cpu_;
    nvrtc_ = gpu_ = nullptr;
    cpu_ = nullptr;
  }

  // Runs the case on `server` and on the CPU backend and compares: within 4 K eps of the exact
  // product for floats (inputs in [-1, 1]), exactly for integers.
  void ExpectMatchesCpu(CudaServer& server, const MatmulCase& mc) {
    std::mt19937 rng(1234);
    std::string data[2];
    const Operand* ins[2] = {&mc.a, &mc.b};
    for (int i = 0; i < 2; ++i) {
      data[i] = RandomBuffer(ins[i]->Layout().SpanElements(), mc.type, rng);
    }
    absl::StatusOr<std::vector<double>> want = RunMatmul(*cpu_, mc, data, /*use_pitch=*/false);
    ASSERT_TRUE(want.ok()) << want.status();
    // Pitched operands take their data densely.
    std::string gpu_data[2] = {data[0], data[1]};
    for (int i = 0; i < 2; ++i) {
      if (!ins[i]->pitched) continue;
      const std::vector<double> v = Gather(data[i], ins[i]->Layout(), mc.type);
      gpu_data[i].assign(v.size() * ElemSize(mc.type), '\0');
      for (size_t j = 0; j < v.size(); ++j) {
        PutElement(gpu_data[i].data() + j * ElemSize(mc.type), mc.type, v[j]);
      }
    }
    absl::StatusOr<std::vector<double>> got = RunMatmul(server, mc, gpu_data, /*use_pitch=*/true);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), want->size());
    const uint64_t k = mc.a.shape.back();
    const double eps = mc.type == ElemType::kF32 ? std::numeric_limits<float>::epsilon()
                                                 : std::numeric_limits<double>::epsilon();
    // f16 and bf16 accumulate in f32 on both and round once: an ulp of the half type apart.
    const double half_ulp = mc.type == ElemType::kF16 ? 2e-3 : 1.6e-2;
    // TF32 rounds each input to 11 significant bits: a product of two is off by at most 2^-10
    // of its size (each |input| <= 1), so a sum of K of them by K 2^-10.
    const double tol = mc.tf32            ? static_cast<double>(k) * std::ldexp(1.0, -10)
                       : IsFloat(mc.type) ? 4.0 * static_cast<double>(k) * eps
                                          : 0.0;
    int reported = 0;
    for (size_t i = 0; i < got->size() && reported < 5; ++i) {
      const double t = IsHalf(mc.type) ? half_ulp * std::max(1.0, std::abs((*want)[i])) + tol : tol;
      if (std::abs((*got)[i] - (*want)[i]) > t) {
        ADD_FAILURE() << mc.name << ": element " << i << " is " << (*got)[i] << " on cuda, "
                      << (*want)[i] << " on cpu";
        ++reported;
      }
    }
  }

  static bool CublasLoaded(const CudaServer& server) {
    const std::vector<std::string>& f = server.Description().features;
    return std::find(f.begin(), f.end(), "cublas_matmul") != f.end();
  }

  static CpuServer* cpu_;
  static CudaServer* gpu_;
  static CudaServer* nvrtc_;  // Made with CUBED_DISABLE_CUBLAS=1.
};

CpuServer* CublasMatmulGpuTest::cpu_ = nullptr;
CudaServer* CublasMatmulGpuTest::gpu_ = nullptr;
CudaServer* CublasMatmulGpuTest::nvrtc_ = nullptr;

TEST_P(CublasMatmulGpuTest, MatchesTheCpuBackend) {
  CUBED_SKIP_WITHOUT_CUDA();
  ASSERT_NE(gpu_, nullptr);
  const MatmulCase& mc = GetParam();
  const uint64_t before = gpu_->cublas().calls();
  ExpectMatchesCpu(*gpu_, mc);
  const bool via_cublas = CublasLoaded(*gpu_) && mc.cublas_expressible && IsFloat(mc.type);
  EXPECT_EQ(gpu_->cublas().calls(), before + (via_cublas ? 1 : 0))
      << "cuBLAS loaded: " << CublasLoaded(*gpu_);
}

TEST_P(CublasMatmulGpuTest, DisabledCublasFallsBackToTheSameResults) {
  CUBED_SKIP_WITHOUT_CUDA();
  ASSERT_NE(nvrtc_, nullptr);
  EXPECT_THAT(nvrtc_->Description().features, Not(Contains("cublas_matmul")));
  ExpectMatchesCpu(*nvrtc_, GetParam());
  EXPECT_EQ(nvrtc_->cublas().calls(), 0u);
}

TEST(CublasMatmulFeatureTest, FeatureSaysWhetherCublasLoaded) {
  CUBED_SKIP_WITHOUT_CUDA();
  std::unique_ptr<CudaServer> server = testing_cuda::MakeCudaServer(uint64_t{64} << 20);
  ASSERT_NE(server, nullptr);
  const std::vector<std::string>& f = server->Description().features;
  EXPECT_EQ(std::find(f.begin(), f.end(), "cublas_matmul") != f.end(), LoadCublas().ok());
}

Operand Op(std::vector<uint64_t> shape, std::vector<uint64_t> strides = {}) {
  return Operand{std::move(shape), std::move(strides), false};
}

Operand Pitched(std::vector<uint64_t> shape) { return Operand{std::move(shape), {}, true}; }

MatmulCase Case(std::string name, ElemType t, Operand a, Operand b, Operand c,
                bool expressible = true) {
  return MatmulCase{std::move(name), t, std::move(a), std::move(b), std::move(c), expressible};
}

std::vector<MatmulCase> Cases() {
  std::vector<MatmulCase> cases;
  for (ElemType t : {ElemType::kF32, ElemType::kF64, ElemType::kF16, ElemType::kBF16}) {
    const std::string ty(ElemTypeName(t));
    cases.push_back(Case("small_" + ty, t, Op({3, 5}), Op({5, 7}), Op({3, 7})));
    cases.push_back(Case("batched_" + ty, t, Op({2, 64, 33}), Op({2, 33, 17}), Op({2, 64, 17})));
    cases.push_back(Case("broadcast_" + ty, t, Op({1, 8, 8}), Op({4, 8, 8}), Op({4, 8, 8})));
    cases.push_back(
        Case("transposed_" + ty, t, Op({33, 20}, {1, 33}), Op({20, 40}, {1, 20}), Op({33, 40})));
    cases.push_back(
        Case("column_major_out_" + ty, t, Op({33, 20}), Op({20, 40}), Op({33, 40}, {1, 33})));
    // Rows of 240 and 120 elements: padded to 256-byte pitches (Note [Pitched tensors]).
    cases.push_back(Case("pitched_" + ty, t, Pitched({2, 5, 240}), Pitched({2, 240, 120}),
                         Pitched({2, 5, 120})));
    cases.push_back(Case("odd_strides_" + ty, t, Op({9, 6}, {12, 2}), Op({6, 5}), Op({9, 5}),
                         /*expressible=*/false));
    // Note [Outer batch dims]: q and k^T of [2, 16, 3 * 3 * 8] qkv rows, split into 3 heads.
    cases.push_back(Case("heads_" + ty, t, Op({2, 3, 16, 8}, {16 * 72, 8, 72, 1}),
                         Op({2, 3, 8, 16}, {16 * 72, 8, 1, 72}), Op({2, 3, 16, 16})));
    cases.push_back(Case("padded_batches_" + ty, t, Op({2, 3, 4, 4}, {100, 16, 4, 1}),
                         Op({2, 3, 4, 4}), Op({2, 3, 4, 4})));
    cases.push_back(
        Case("folded_batches_" + ty, t, Op({3, 40, 24}), Op({1, 24, 33}), Op({3, 40, 33})));
  }
  cases.push_back(Case("small_i32", ElemType::kI32, Op({3, 5}), Op({5, 7}), Op({3, 7})));
  // f32 allowed to run on TF32 (cublasGemmStridedBatchedEx, CUBLAS_COMPUTE_32F_FAST_TF32).
  for (MatmulCase c :
       {Case("tf32_small", ElemType::kF32, Op({3, 5}), Op({5, 7}), Op({3, 7})),
        Case("tf32_batched", ElemType::kF32, Op({2, 64, 33}), Op({2, 33, 17}), Op({2, 64, 17})),
        Case("tf32_transposed", ElemType::kF32, Op({33, 20}, {1, 33}), Op({20, 40}, {1, 20}),
             Op({33, 40})),
        Case("tf32_heads", ElemType::kF32, Op({2, 3, 16, 8}, {16 * 72, 8, 72, 1}),
             Op({2, 3, 8, 16}, {16 * 72, 8, 1, 72}), Op({2, 3, 16, 16}))}) {
    c.tf32 = true;
    cases.push_back(std::move(c));
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Layouts, CublasMatmulGpuTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<MatmulCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace cubed
