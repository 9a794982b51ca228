#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/test_tensor.h"

namespace cubed::kernels::testing {
namespace {

const std::vector<ElemType>& kAll = kNumeric;

struct Case {
  std::vector<uint64_t> a, b, out;
};

// Checks out == a x b in double, broadcasting batch dims.
void ExpectMatmul(const TestTensor& a, const TestTensor& b, const TestTensor& out,
                  const std::string& what) {
  const size_t r = out.shape().size();
  const uint64_t k_len = a.shape()[r - 1];
  const ElemType dt = out.dtype();
  ForEachIndex(out.shape(), [&](const std::vector<uint64_t>& idx) {
    std::vector<uint64_t> ai = idx, bi = idx;
    for (size_t d = 0; d + 2 < r; ++d) {
      if (a.shape()[d] == 1) ai[d] = 0;
      if (b.shape()[d] == 1) bi[d] = 0;
    }
    double want = 0;
    for (uint64_t k = 0; k < k_len; ++k) {
      ai[r - 1] = k;
      bi[r - 2] = k;
      want += a.GetDouble(ai) * b.GetDouble(bi);
    }
    want = RoundTo(want, dt);  // Integers wrap; halves round once from the f32 accumulator.
    const double rel = dt == ElemType::kF32 ? 1e-5 * std::sqrt(static_cast<double>(k_len) + 1) : 0;
    ASSERT_TRUE(Close(out.GetDouble(idx), want, dt, rel))
        << what << " " << DtypeName(dt) << " got " << out.GetDouble(idx) << " want " << want;
  });
}

TEST(MatmulTest, EveryDtypeShapeAndLayoutMatchesReference) {
  const std::vector<Case> cases = {
      {{1, 1}, {1, 1}, {1, 1}},
      {{7, 5}, {5, 3}, {7, 3}},
      {{1, 9}, {9, 1}, {1, 1}},
      {{13, 17}, {17, 11}, {13, 11}},
      {{2, 3, 5, 4}, {1, 3, 4, 6}, {2, 3, 5, 6}},  // Broadcast batch.
      {{1, 6, 2}, {4, 2, 7}, {4, 6, 7}},
  };
  const std::vector<std::vector<Layout>> layouts = {
      {Layout::kContiguous, Layout::kContiguous, Layout::kContiguous},
      {Layout::kColumnMajor, Layout::kColumnMajor, Layout::kPadded},
      {Layout::kPadded, Layout::kStepped, Layout::kColumnMajor},
  };
  uint64_t seed = 2000;
  for (ElemType dt : kAll) {
    for (const Case& c : cases) {
      for (const auto& l : layouts) {
        TestTensor a(dt, c.a, l[0]), b(dt, c.b, l[1]), out(dt, c.out, l[2]);
        a.FillRandom(seed++);
        b.FillRandom(seed++);
        ASSERT_TRUE(RunKernel(MakeCall("matmul", dt), {&a, &b, &out}).ok());
        ExpectMatmul(a, b, out, "matmul");
        ASSERT_TRUE(out.PaddingIntact());
      }
    }
  }
}

TEST(MatmulTest, CrossesEveryBlockBoundary) {
  // M, N and K beyond one row block (32), column panel (256) and depth slab (256).
  for (Layout lb : {Layout::kContiguous, Layout::kColumnMajor}) {
    TestTensor a(ElemType::kF32, {37, 300}), b(ElemType::kF32, {300, 261}, lb),
        out(ElemType::kF32, {37, 261});
    a.FillRandom(1);
    b.FillRandom(2);
    ASSERT_TRUE(RunKernel(MakeCall("matmul", ElemType::kF32), {&a, &b, &out}).ok());
    ExpectMatmul(a, b, out, "blocked");
  }
  TestTensor a(ElemType::kI64, {35, 260}), b(ElemType::kI64, {260, 258}),
      out(ElemType::kI64, {35, 258});
  a.FillRandom(3);
  b.FillRandom(4);
  ASSERT_TRUE(RunKernel(MakeCall("matmul", ElemType::kI64), {&a, &b, &out}).ok());
  ExpectMatmul(a, b, out, "blocked");
}

TEST(MatmulTest, EmptyInnerDimensionWritesZeros) {
  TestTensor a(ElemType::kF32, {3, 0}), b(ElemType::kF32, {0, 4}), out(ElemType::kF32, {3, 4});
  ForEachIndex(out.shape(), [&](const auto& idx) { out.Set<float>(idx, 5.f); });
  ASSERT_TRUE(RunKernel(MakeCall("matmul", ElemType::kF32), {&a, &b, &out}).ok());
  ForEachIndex(out.shape(), [&](const auto& idx) { EXPECT_EQ(out.Get<float>(idx), 0.f); });
}

TEST(MatmulTest, ManySmallBatches) {
  TestTensor a(ElemType::kF64, {500, 2, 3}), b(ElemType::kF64, {500, 3, 2}),
      out(ElemType::kF64, {500, 2, 2});
  a.FillRandom(5);
  b.FillRandom(6);
  ASSERT_TRUE(RunKernel(MakeCall("matmul", ElemType::kF64), {&a, &b, &out}).ok());
  ExpectMatmul(a, b, out, "batched");
}

}  // namespace
}  // namespace cubed::kernels::testing
