#include <algorithm>
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/test_tensor.h"

namespace cubed::kernels::testing {
namespace {

TEST(SoftmaxTest, RowsMatchReferenceAndSumToOne) {
  const std::vector<std::vector<uint64_t>> shapes = {{1},    {7},       {1023},
                                                     {3, 5}, {2, 3, 4}, {2, 1, 3, 5}};
  uint64_t seed = 3000;
  for (ElemType dt : kFloatTypes) {
    for (const auto& shape : shapes) {
      for (const auto& [li, lo] :
           std::vector<std::pair<Layout, Layout>>{{Layout::kContiguous, Layout::kContiguous},
                                                  {Layout::kColumnMajor, Layout::kPadded},
                                                  {Layout::kPadded, Layout::kStepped}}) {
        TestTensor in(dt, shape, li), out(dt, shape, lo);
        in.FillRandom(seed++, -10, 10);
        ASSERT_TRUE(RunKernel(MakeCall("softmax", dt), {&in, &out}).ok());
        std::vector<uint64_t> rows = shape;
        const uint64_t len = rows.back();
        rows.back() = 1;
        ForEachIndex(rows, [&](std::vector<uint64_t> idx) {
          double m = -INFINITY, z = 0, total = 0;
          for (uint64_t i = 0; i < len; ++i) {
            idx.back() = i;
            m = std::max(m, in.GetDouble(idx));
          }
          for (uint64_t i = 0; i < len; ++i) {
            idx.back() = i;
            z += std::exp(in.GetDouble(idx) - m);
          }
          for (uint64_t i = 0; i < len; ++i) {
            idx.back() = i;
            const double want = std::exp(in.GetDouble(idx) - m) / z;
            ASSERT_TRUE(Close(out.GetDouble(idx), want, dt))
                << out.GetDouble(idx) << " vs " << want;
            total += out.GetDouble(idx);
          }
          ASSERT_NEAR(total, 1.0,
                      dt == ElemType::kF32   ? 1e-4
                      : dt == ElemType::kF64 ? 1e-12
                                             : 0.03);
        });
        ASSERT_TRUE(out.PaddingIntact());
      }
    }
  }
}

// Note [Long softmax rows]: one row longer than two slices (fewer rows than threads), strided or in
// place, match the reference.
TEST(SoftmaxTest, LongRowsSplitAcrossThreadsMatchReference) {
  uint64_t seed = 4000;
  for (ElemType dt : kFloatTypes) {
    for (const auto& [shape, layout] : std::vector<std::pair<std::vector<uint64_t>, Layout>>{
             {{1, 300001}, Layout::kContiguous}, {{1, 140000}, Layout::kPadded}}) {
      TestTensor in(dt, shape, layout), out(dt, shape, Layout::kContiguous);
      in.FillRandom(seed++, -10, 10);
      ASSERT_TRUE(RunKernel(MakeCall("softmax", dt), {&in, &out}).ok());
      const uint64_t len = shape.back();
      for (uint64_t row = 0; row < shape[0]; ++row) {
        double m = -INFINITY, z = 0;
        for (uint64_t i = 0; i < len; ++i) m = std::max(m, in.GetDouble({row, i}));
        for (uint64_t i = 0; i < len; ++i) z += std::exp(in.GetDouble({row, i}) - m);
        for (uint64_t i = 0; i < len; i += 997) {
          const double want = std::exp(in.GetDouble({row, i}) - m) / z;
          ASSERT_TRUE(Close(out.GetDouble({row, i}), want, dt))
              << ElemTypeName(dt) << " [" << row << ", " << i << "] " << out.GetDouble({row, i})
              << " vs " << want;
        }
      }
      ASSERT_TRUE(in.PaddingIntact());
      // In place: the output is the input's memory with its layout.
      if (layout == Layout::kContiguous) {
        TestTensor same(dt, shape, layout);
        same.FillRandom(seed - 1, -10, 10);
        ASSERT_TRUE(RunKernel(MakeCall("softmax", dt), {&same, &same}).ok());
        for (uint64_t i = 0; i < len; i += 997) {
          ASSERT_EQ(same.GetDouble({0, i}), out.GetDouble({0, i})) << ElemTypeName(dt) << " " << i;
        }
      }
    }
  }
}

TEST(SoftmaxTest, HugeLogitsStayFinite) {
  TestTensor in(ElemType::kF32, {1, 3}), out(ElemType::kF32, {1, 3});
  in.Set<float>({0, 0}, 1000.f);
  in.Set<float>({0, 1}, 1000.f);
  in.Set<float>({0, 2}, -1000.f);
  ASSERT_TRUE(RunKernel(MakeCall("softmax", ElemType::kF32), {&in, &out}).ok());
  EXPECT_FLOAT_EQ(out.Get<float>({0, 0}), 0.5f);
  EXPECT_FLOAT_EQ(out.Get<float>({0, 1}), 0.5f);
  EXPECT_EQ(out.Get<float>({0, 2}), 0.f);
}

TEST(SoftmaxTest, RunsInPlace) {
  TestTensor t(ElemType::kF64, {4, 33}, Layout::kPadded);
  t.FillRandom(11);
  BuiltinCall call = MakeCall("softmax", ElemType::kF64);
  call.metadata = kernels::ToMetadataWords(
      *EncodeKernelMetadata({t.buffer_len(), t.buffer_len()}, {t.layout(), t.layout()}));
  ASSERT_TRUE(RunBuiltinCpu(call, {t.buffer(), t.buffer()}).ok());
  for (uint64_t r = 0; r < 4; ++r) {
    double total = 0;
    for (uint64_t i = 0; i < 33; ++i) total += t.Get<double>({r, i});
    EXPECT_NEAR(total, 1.0, 1e-12);
  }
}

TEST(SoftmaxTest, ManyRowsInParallel) {
  TestTensor in(ElemType::kF32, {4000, 17}), out(ElemType::kF32, {4000, 17});
  in.FillRandom(12, -5, 5);
  ASSERT_TRUE(RunKernel(MakeCall("softmax", ElemType::kF32), {&in, &out}).ok());
  for (uint64_t r = 0; r < 4000; ++r) {
    double total = 0;
    for (uint64_t i = 0; i < 17; ++i) total += out.Get<float>({r, i});
    ASSERT_NEAR(total, 1.0, 1e-5);
  }
}

// causal_softmax: a call with its scale.
BuiltinCall CausalCall(ElemType dt, double scale, ElemType scale_type = ElemType::kF64) {
  BuiltinCall call = MakeCall("causal_softmax", dt);
  call.scalars.push_back(OneScalar(scale_type, scale));
  return call;
}

// The f64 reference of causal_softmax at every index of `out` (Note [Causal rows]): query
// idx[rank - 2] sees keys 0..query, each scaled.
void ExpectCausal(const TestTensor& in, const TestTensor& out, const std::vector<uint64_t>& shape,
                  double scale, ElemType dt) {
  std::vector<uint64_t> rows = shape;
  const uint64_t len = rows.back();
  rows.back() = 1;
  ForEachIndex(rows, [&](std::vector<uint64_t> idx) {
    const uint64_t visible = std::min(len, idx[idx.size() - 2] + 1);
    double m = -INFINITY, z = 0;
    for (uint64_t i = 0; i < visible; ++i) {
      idx.back() = i;
      m = std::max(m, scale * in.GetDouble(idx));
    }
    for (uint64_t i = 0; i < visible; ++i) {
      idx.back() = i;
      z += std::exp(scale * in.GetDouble(idx) - m);
    }
    for (uint64_t i = 0; i < len; ++i) {
      idx.back() = i;
      const double want = i < visible ? std::exp(scale * in.GetDouble(idx) - m) / z : 0.0;
      ASSERT_TRUE(Close(out.GetDouble(idx), want, dt))
          << ElemTypeName(dt) << " at query " << idx[idx.size() - 2] << ", key " << i << ": "
          << out.GetDouble(idx) << " vs " << want;
      if (i >= visible) {
        ASSERT_EQ(out.GetDouble(idx), 0.0);  // Exactly 0, not a tiny exp.
      }
    }
  });
}

TEST(CausalSoftmaxTest, LowerTriangleMatchesReference) {
  // [queries, keys]: square, fewer queries than keys, more queries than keys (rows past the last
  // key see all of them), batched heads, size-1 dims.
  const std::vector<std::vector<uint64_t>> shapes = {{5, 5}, {3, 9}, {9, 3}, {2, 3, 7, 7},
                                                     {1, 1}, {4, 1}, {1, 6}, {2, 1, 33, 40}};
  uint64_t seed = 5000;
  for (ElemType dt : kFloatTypes) {
    for (const auto& shape : shapes) {
      for (const auto& [li, lo] :
           std::vector<std::pair<Layout, Layout>>{{Layout::kContiguous, Layout::kContiguous},
                                                  {Layout::kColumnMajor, Layout::kPadded},
                                                  {Layout::kPadded, Layout::kStepped}}) {
        for (const double scale : {0.125, 1.0, -2.0}) {
          TestTensor in(dt, shape, li), out(dt, shape, lo);
          in.FillRandom(seed++, -10, 10);
          out.FillRandom(seed++, 50, 60);  // Masked outputs must be written, not left.
          ASSERT_TRUE(RunKernel(CausalCall(dt, scale), {&in, &out}).ok());
          ExpectCausal(in, out, shape, scale, dt);
          ASSERT_TRUE(out.PaddingIntact());
        }
      }
    }
  }
}

// Note [Long softmax rows] with the causal rule: a row longer than two slices (one query: only
// rows fewer than the threads take that path, so a few keys are visible and the rest is 0).
TEST(CausalSoftmaxTest, LongRowsMatchReference) {
  uint64_t seed = 6000;
  for (ElemType dt : {ElemType::kF32, ElemType::kBF16}) {
    const std::vector<uint64_t> shape = {1, 140000};
    TestTensor in(dt, shape), out(dt, shape);
    in.FillRandom(seed++, -10, 10);
    out.FillRandom(seed++, 50, 60);
    ASSERT_TRUE(RunKernel(CausalCall(dt, 0.5), {&in, &out}).ok());
    ExpectCausal(in, out, shape, 0.5, dt);
  }
}

TEST(CausalSoftmaxTest, ScaleMayBeF32AndRunsInPlace) {
  const std::vector<uint64_t> shape = {2, 6, 6};
  TestTensor in(ElemType::kF32, shape), out(ElemType::kF32, shape);
  in.FillRandom(7, -3, 3);
  ASSERT_TRUE(RunKernel(CausalCall(ElemType::kF32, 0.25, ElemType::kF32), {&in, &out}).ok());
  ExpectCausal(in, out, shape, 0.25, ElemType::kF32);
  TestTensor same(ElemType::kF32, shape);
  same.FillRandom(7, -3, 3);
  ASSERT_TRUE(RunKernel(CausalCall(ElemType::kF32, 0.25), {&same, &same}).ok());
  ForEachIndex(shape, [&](const std::vector<uint64_t>& idx) {
    ASSERT_EQ(same.GetDouble(idx), out.GetDouble(idx));
  });
}

// -inf scores (a mask already applied) are visible elements like any other: a visible row of
// -inf only gives NaN, as softmax; +inf gives NaN.
TEST(CausalSoftmaxTest, SpecialValuesFollowSoftmax) {
  TestTensor in(ElemType::kF32, {3, 3}), out(ElemType::kF32, {3, 3});
  for (uint64_t i = 0; i < 3; ++i) {
    for (uint64_t j = 0; j < 3; ++j) in.Set<float>({i, j}, 1.f);
  }
  in.Set<float>({0, 0}, -INFINITY);
  in.Set<float>({1, 1}, -INFINITY);
  in.Set<float>({2, 2}, NAN);
  ASSERT_TRUE(RunKernel(CausalCall(ElemType::kF32, 1.0), {&in, &out}).ok());
  EXPECT_TRUE(std::isnan(out.Get<float>({0, 0})));
  EXPECT_EQ(out.Get<float>({0, 1}), 0.f);
  EXPECT_EQ(out.Get<float>({1, 0}), 1.f);
  EXPECT_EQ(out.Get<float>({1, 1}), 0.f);
  EXPECT_TRUE(std::isnan(out.Get<float>({2, 0})));
}

}  // namespace
}  // namespace cubed::kernels::testing
