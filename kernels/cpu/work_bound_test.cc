// The work bound (docs/kernel-abi.md, "Work bound"; docs/security.md, "Fuzzing"): calls whose
// work the memory they bind does not bound are refused before they run, quickly, and the
// legitimate broadcasts next to them still run and give the right answers.

#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/kernel_metadata.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/builtin.h"
#include "kernels/builtin_test_util.h"
#include "kernels/cpu/cpu_kernels.h"

namespace cubed::kernels::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TensorLayout Strided(std::vector<uint64_t> shape, std::vector<uint64_t> strides) {
  TensorLayout t = TensorLayout::Contiguous(shape);
  for (size_t d = 0; d < strides.size(); ++d) t.strides[d] = strides[d];
  return t;
}

// Runs `call` with `layouts` bound to float buffers of `lens` elements (also metadata
// buffer_len); returns the status and how long the call took.
struct Timed {
  absl::Status status;
  std::chrono::steady_clock::duration took;
};
Timed RunF32(BuiltinCall call, const std::vector<TensorLayout>& layouts,
             std::vector<std::vector<float>>& buffers) {
  std::vector<uint64_t> lens;
  std::vector<HostBuffer> host;
  for (auto& b : buffers) {
    lens.push_back(b.size());
    host.push_back({reinterpret_cast<uint8_t*>(b.data()), b.size() * sizeof(float)});
  }
  call.metadata = kernels::ToMetadataWords(*EncodeKernelMetadata(lens, layouts));
  const auto start = std::chrono::steady_clock::now();
  absl::Status st = RunBuiltinCpu(call, host);
  return {std::move(st), std::chrono::steady_clock::now() - start};
}

constexpr auto kQuick = std::chrono::milliseconds(500);

TEST(WorkBoundTest, DocumentedReproducerIsRefusedQuickly) {
  // docs/security.md: sum over [100000000] with stride 0 bound to one f32 (it ran 6.7 s).
  BuiltinCall call = MakeCall("sum", ElemType::kF32);
  call.metadata = {1, 1, 100000000, 1, 1, 1, 10, 11, 12, 13, 100000000, 1, 0, 1};
  std::vector<float> in = {1.0f}, out = {0.0f};
  const auto start = std::chrono::steady_clock::now();
  const absl::Status st =
      RunBuiltinCpu(call, {HostBuffer{reinterpret_cast<uint8_t*>(in.data()), 4},
                           HostBuffer{reinterpret_cast<uint8_t*>(out.data()), 4}});
  EXPECT_LT(std::chrono::steady_clock::now() - start, kQuick);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("kernel 'sum': buffer 0 (in)"),
                                  HasSubstr("shape [100000000], strides [0]"),
                                  HasSubstr("claims 100000000 elements"),
                                  HasSubstr("holds 1 f32 elements"), HasSubstr("Work bound")));
  EXPECT_EQ(out[0], 0.0f);  // Nothing ran.
}

TEST(WorkBoundTest, ReductionsMayNotRepeatTheirInput) {
  for (const char* name : {"sum", "max", "min", "mean"}) {  // argmax: the same check.
    BuiltinCall call = MakeCall(name, ElemType::kF32);
    std::vector<std::vector<float>> bufs = {{1.0f}, {0.0f}};
    const Timed t = RunF32(call, {Strided({4294967295}, {0}), TensorLayout::Contiguous({1})}, bufs);
    EXPECT_LT(t.took, kQuick) << name;
    EXPECT_EQ(t.status.code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(t.status.message(), HasSubstr("claims 4294967295 elements")) << name;
  }
  // Overlapping (non-zero) strides repeat data too: a [2000, 2000] sliding window over 3999.
  BuiltinCall sum = MakeCall("sum", ElemType::kF32);
  std::vector<std::vector<float>> w2 = {std::vector<float>(3999, 1.0f),
                                        std::vector<float>(2000, 0.0f)};
  sum.axis = 1;
  Timed t = RunF32(sum, {Strided({2000, 2000}, {1, 1}), TensorLayout::Contiguous({2000, 1})}, w2);
  EXPECT_EQ(t.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status.message(), AllOf(HasSubstr("shape [2000, 2000], strides [1, 1]"),
                                        HasSubstr("claims 4000000"), HasSubstr("holds 3999")));
  // Broadcast along kept dims, reduced along the broadcast: [B, L] strides [0, 1] is refused
  // (B copies of one sum: quadratic work from linear memory).
  std::vector<std::vector<float>> row = {std::vector<float>(1000, 1.0f),
                                         std::vector<float>(1000, 0.0f)};
  t = RunF32(sum, {Strided({1000, 1000}, {0, 1}), TensorLayout::Contiguous({1000, 1})}, row);
  EXPECT_EQ(t.status.code(), absl::StatusCode::kInvalidArgument);
}

TEST(WorkBoundTest, ReductionsOverRealDataAndSizeOneAxesRun) {
  // Transposed and stepped inputs read each element once: allowed.
  std::vector<std::vector<float>> b = {{1, 2, 3, 4, 5, 6}, {0, 0, 0}};
  BuiltinCall sum = MakeCall("sum", ElemType::kF32);
  sum.axis = 0;
  Timed t = RunF32(sum, {Strided({2, 3}, {1, 2}), TensorLayout::Contiguous({1, 3})}, b);
  ASSERT_TRUE(t.status.ok()) << t.status;
  EXPECT_EQ(b[1], (std::vector<float>{3, 7, 11}));
  // A broadcast input reduced along an axis of size 1 claims no more than out has.
  std::vector<std::vector<float>> c = {{5}, std::vector<float>(8, 0)};
  sum.axis = 1;
  t = RunF32(sum, {Strided({8, 1}, {0, 1}), TensorLayout::Contiguous({8, 1})}, c);
  ASSERT_TRUE(t.status.ok()) << t.status;
  EXPECT_EQ(c[1], std::vector<float>(8, 5));
  // A broadcast input whose buffer holds as many elements as it claims: allowed.
  std::vector<std::vector<float>> d = {std::vector<float>(6, 2), {0, 0}};
  t = RunF32(sum, {Strided({2, 3}, {0, 1}), TensorLayout::Contiguous({2, 1})}, d);
  ASSERT_TRUE(t.status.ok()) << t.status;
  EXPECT_EQ(d[1], (std::vector<float>{6, 6}));
}

TEST(WorkBoundTest, MatmulMayNotRepeatItsInnerDim) {
  // docs/security.md: a = [1, K], b = [K, N], both stride 0 from 4 bytes (K = 10^7 ran 1.2 s).
  for (uint64_t k : {uint64_t{10000000}, uint64_t{4294967295}}) {
    std::vector<std::vector<float>> b = {{1}, {1}, {0}};
    const Timed t = RunF32(
        MakeCall("matmul", ElemType::kF32),
        {Strided({1, k}, {0, 0}), Strided({k, 1}, {0, 0}), TensorLayout::Contiguous({1, 1})}, b);
    EXPECT_LT(t.took, kQuick);
    EXPECT_EQ(t.status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(t.status.message(),
                AllOf(HasSubstr("buffer 0 (a)"), HasSubstr(absl::StrCat("claims ", k)),
                      HasSubstr("holds 1 f32"), HasSubstr(absl::StrCat("K = ", k, " > N = 1"))));
    EXPECT_EQ(b[2][0], 0.0f);
  }
  // a real, b repeated: b is named.
  std::vector<std::vector<float>> b = {std::vector<float>(1000, 1), {1}, {0}};
  const Timed t = RunF32(MakeCall("matmul", ElemType::kF32),
                         {TensorLayout::Contiguous({1, 1000}), Strided({1000, 1}, {0, 0}),
                          TensorLayout::Contiguous({1, 1})},
                         b);
  EXPECT_THAT(t.status.message(), AllOf(HasSubstr("buffer 1 (b)"), HasSubstr("K = 1000 > M = 1")));
}

TEST(WorkBoundTest, MatmulOutBatchMustComeFromAnOperand) {
  // Real operands, but out's batch of 1000 repeats the same product 1000 times.
  std::vector<std::vector<float>> b = {std::vector<float>(1000, 1), std::vector<float>(1000, 1),
                                       std::vector<float>(1000, 0)};
  Timed t = RunF32(MakeCall("matmul", ElemType::kF32),
                   {TensorLayout::Contiguous({1, 1, 1000}), TensorLayout::Contiguous({1, 1000, 1}),
                    TensorLayout::Contiguous({1000, 1, 1})},
                   b);
  EXPECT_EQ(t.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status.message(), HasSubstr("out batch dim 0 is 1000"));
  // The same with both batch dims broadcast by stride 0.
  t = RunF32(MakeCall("matmul", ElemType::kF32),
             {Strided({1000, 1, 1000}, {0, 1000, 1}), Strided({1000, 1000, 1}, {0, 1, 1}),
              TensorLayout::Contiguous({1000, 1, 1})},
             b);
  EXPECT_EQ(t.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status.message(), HasSubstr("out batch dim 0 is 1000"));
}

TEST(WorkBoundTest, LegitimateMatmulBroadcastsRun) {
  // Shared weights as an expanded view: a [3, 2, 4] dense @ b [3, 4, 5] with batch stride 0.
  std::vector<float> a(24), w(20);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 7) - 3;
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 5) - 2;
  std::vector<std::vector<float>> b = {a, w, std::vector<float>(30, 0)};
  Timed t = RunF32(MakeCall("matmul", ElemType::kF32),
                   {TensorLayout::Contiguous({3, 2, 4}), Strided({3, 4, 5}, {0, 5, 1}),
                    TensorLayout::Contiguous({3, 2, 5})},
                   b);
  ASSERT_TRUE(t.status.ok()) << t.status;
  for (int bt = 0; bt < 3; ++bt) {
    for (int i = 0; i < 2; ++i) {
      for (int j = 0; j < 5; ++j) {
        float want = 0;
        for (int k = 0; k < 4; ++k) want += a[bt * 8 + i * 4 + k] * w[k * 5 + j];
        EXPECT_EQ(b[2][bt * 10 + i * 5 + j], want) << bt << " " << i << " " << j;
      }
    }
  }
  // Batch dims broadcast from both sides by size 1 (numpy's rule), and a row-broadcast a whose
  // K does not exceed N.
  const std::vector<std::vector<uint64_t>> s = {{2, 1, 5, 3}, {1, 4, 3, 2}, {2, 4, 5, 2}};
  EXPECT_TRUE(
      ValidateBuiltin(ContiguousCall("matmul", ElemType::kF32, s), ContiguousBytes(s)).ok());
  std::vector<std::vector<float>> r = {{1, 2}, {1, 0, 0, 0, 1, 0}, std::vector<float>(12, 0)};
  t = RunF32(
      MakeCall("matmul", ElemType::kF32),
      {Strided({4, 2}, {0, 1}), TensorLayout::Contiguous({2, 3}), TensorLayout::Contiguous({4, 3})},
      r);
  ASSERT_TRUE(t.status.ok()) << t.status;
  EXPECT_EQ(r[2], (std::vector<float>{1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0}));
}

TEST(WorkBoundTest, ElementwiseBroadcastsAndWindowsStillRun) {
  // numpy-style: a scalar and a row vector expanded by stride 0 to the output's [4, 5].
  std::vector<std::vector<float>> b = {{10}, {0, 1, 2, 3, 4}, std::vector<float>(20, 0)};
  Timed t = RunF32(
      MakeCall("add", ElemType::kF32),
      {Strided({4, 5}, {0, 0}), Strided({4, 5}, {0, 1}), TensorLayout::Contiguous({4, 5})}, b);
  ASSERT_TRUE(t.status.ok()) << t.status;
  for (int i = 0; i < 20; ++i) EXPECT_EQ(b[2][i], 10.0f + static_cast<float>(i % 5));
  // An overlapping (sliding-window) input: the work is the output's, which must be real.
  std::vector<std::vector<float>> c = {{0, 1, 2, 3, 4, 5}, std::vector<float>(12, 0)};
  t = RunF32(MakeCall("copy", ElemType::kF32),
             {Strided({4, 3}, {1, 1}), TensorLayout::Contiguous({4, 3})}, c);
  ASSERT_TRUE(t.status.ok()) << t.status;
  EXPECT_EQ(c[1], (std::vector<float>{0, 1, 2, 1, 2, 3, 2, 3, 4, 3, 4, 5}));
  // softmax rows of a broadcast input.
  std::vector<std::vector<float>> d = {{1, 1}, std::vector<float>(6, 0)};
  t = RunF32(MakeCall("softmax", ElemType::kF32),
             {Strided({3, 2}, {0, 1}), TensorLayout::Contiguous({3, 2})}, d);
  ASSERT_TRUE(t.status.ok()) << t.status;
  EXPECT_EQ(d[1], std::vector<float>(6, 0.5f));
}

TEST(WorkBoundTest, AttentionMayNotRepeatKeysOrValues) {
  // One key and value, repeated 10^7 times through stride 0: every query would read them all.
  const uint64_t s_len = 10000000;
  for (uint32_t repeated : {1u, 2u}) {
    std::vector<std::vector<float>> b = {{1}, {1}, {1}, {0}};
    std::vector<TensorLayout> layouts = {
        TensorLayout::Contiguous({1, 1}), TensorLayout::Contiguous({s_len, 1}),
        TensorLayout::Contiguous({s_len, 1}), TensorLayout::Contiguous({1, 1})};
    b[repeated == 1 ? 2 : 1].resize(s_len, 1.0f);  // The other one is real.
    layouts[repeated] = Strided({s_len, 1}, {0, 0});
    BuiltinCall call = MakeCall("causal_attention", ElemType::kF32);
    call.scalars.push_back(OneScalar(ElemType::kF64, 1.0));
    const Timed t = RunF32(call, layouts, b);
    EXPECT_LT(t.took, kQuick);
    EXPECT_EQ(t.status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(
        t.status.message(),
        AllOf(HasSubstr(repeated == 1 ? "buffer 1 (k)" : "buffer 2 (v)"),
              HasSubstr("claims 10000000"), HasSubstr("holds 1 f32"), HasSubstr("Work bound")));
    EXPECT_EQ(b[3][0], 0.0f);
  }
  // Heads sharing one key and value (stride-0 batch dims, as in multi-query attention) run.
  std::vector<std::vector<float>> b = {{1, 2, 3}, {1}, {5}, {0, 0, 0}};
  BuiltinCall call = MakeCall("causal_attention", ElemType::kF32);
  call.scalars.push_back(OneScalar(ElemType::kF64, 1.0));
  const Timed t = RunF32(call,
                         {TensorLayout::Contiguous({3, 1, 1}), Strided({3, 1, 1}, {0, 1, 1}),
                          Strided({3, 1, 1}, {0, 1, 1}), TensorLayout::Contiguous({3, 1, 1})},
                         b);
  ASSERT_TRUE(t.status.ok()) << t.status;
  EXPECT_EQ(b[3], (std::vector<float>{5, 5, 5}));
}

}  // namespace
}  // namespace cubed::kernels::testing
