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
  call.metadata = *EncodeKernelMetadata({t.buffer_len(), t.buffer_len()}, {t.layout(), t.layout()});
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

}  // namespace
}  // namespace cubed::kernels::testing
