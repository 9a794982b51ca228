#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/test_tensor.h"

namespace cubed::kernels::testing {
namespace {

struct UnaryCase {
  std::string name;
  std::vector<ElemType> dtypes;
  double lo, hi;  // Input range for floats.
  double (*ref)(double);
};

const std::vector<ElemType>& kSigned = kSignedTypes;
const std::vector<ElemType>& kFloats = kFloatTypes;

std::vector<UnaryCase> Cases() {
  return {
      {"neg", kSigned, -3, 3, [](double x) { return -x; }},
      {"abs", kSigned, -3, 3, [](double x) { return std::fabs(x); }},
      {"relu", kSigned, -3, 3, [](double x) { return x < 0 ? 0.0 : x; }},
      {"exp", kFloats, -5, 5, [](double x) { return std::exp(x); }},
      {"log", kFloats, 0.01, 10, [](double x) { return std::log(x); }},
      {"sqrt", kFloats, 0, 10, [](double x) { return std::sqrt(x); }},
      {"sigmoid", kFloats, -20, 20, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }},
      {"tanh", kFloats, -4, 4, [](double x) { return std::tanh(x); }},
  };
}

struct LayoutPair {
  Layout in, out;
};

TEST(UnaryTest, EveryOpDtypeShapeAndLayoutMatchesReference) {
  const std::vector<std::vector<uint64_t>> shapes = {{},     {1},       {7},         {1023},
                                                     {3, 5}, {2, 3, 4}, {2, 1, 3, 5}};
  const std::vector<LayoutPair> layouts = {{Layout::kContiguous, Layout::kContiguous},
                                           {Layout::kPadded, Layout::kContiguous},
                                           {Layout::kColumnMajor, Layout::kStepped},
                                           {Layout::kStepped, Layout::kPadded}};
  uint64_t seed = 1;
  for (const UnaryCase& c : Cases()) {
    for (ElemType dt : c.dtypes) {
      for (const auto& shape : shapes) {
        for (const LayoutPair& lp : layouts) {
          TestTensor in(dt, shape, lp.in), out(dt, shape, lp.out);
          in.FillRandom(seed++, c.lo, c.hi);
          ASSERT_TRUE(RunKernel(MakeCall(c.name, dt), {&in, &out}).ok());
          ForEachIndex(shape, [&](const std::vector<uint64_t>& idx) {
            const double want = c.ref(in.GetDouble(idx));
            ASSERT_TRUE(Close(out.GetDouble(idx), want, dt))
                << c.name << " " << DtypeName(dt) << " got " << out.GetDouble(idx) << " want "
                << want << " for " << in.GetDouble(idx);
          });
          ASSERT_TRUE(out.PaddingIntact()) << c.name << " wrote outside its output layout";
        }
      }
    }
  }
}

TEST(UnaryTest, IntegerNegAndAbsOfMinimumWrap) {
  TestTensor in(ElemType::kI32, {2}), out(ElemType::kI32, {2});
  in.Set<int32_t>({0}, std::numeric_limits<int32_t>::min());
  in.Set<int32_t>({1}, -7);
  ASSERT_TRUE(RunKernel(MakeCall("neg", ElemType::kI32), {&in, &out}).ok());
  EXPECT_EQ(out.Get<int32_t>({0}), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(out.Get<int32_t>({1}), 7);
  TestTensor in64(ElemType::kI64, {1}), out64(ElemType::kI64, {1});
  in64.Set<int64_t>({0}, std::numeric_limits<int64_t>::min());
  ASSERT_TRUE(RunKernel(MakeCall("abs", ElemType::kI64), {&in64, &out64}).ok());
  EXPECT_EQ(out64.Get<int64_t>({0}), std::numeric_limits<int64_t>::min());
}

TEST(UnaryTest, FloatEdgeCases) {
  TestTensor in(ElemType::kF32, {4}), out(ElemType::kF32, {4});
  in.Set<float>({0}, std::nanf(""));
  in.Set<float>({1}, -1000.f);
  in.Set<float>({2}, 1000.f);
  in.Set<float>({3}, -0.f);
  ASSERT_TRUE(RunKernel(MakeCall("relu", ElemType::kF32), {&in, &out}).ok());
  EXPECT_TRUE(std::isnan(out.Get<float>({0}))) << "relu passes NaN through";
  EXPECT_EQ(out.Get<float>({1}), 0.f);
  ASSERT_TRUE(RunKernel(MakeCall("sigmoid", ElemType::kF32), {&in, &out}).ok());
  EXPECT_EQ(out.Get<float>({1}), 0.f);
  EXPECT_EQ(out.Get<float>({2}), 1.f);
  EXPECT_EQ(out.Get<float>({3}), 0.5f);
  ASSERT_TRUE(RunKernel(MakeCall("log", ElemType::kF32), {&in, &out}).ok());
  EXPECT_TRUE(std::isnan(out.Get<float>({1})));
  EXPECT_EQ(out.Get<float>({3}), -std::numeric_limits<float>::infinity());
}

TEST(UnaryTest, RunsInPlace) {
  TestTensor t(ElemType::kF64, {5, 9}, Layout::kPadded);
  t.FillRandom(7);
  std::vector<double> before;
  ForEachIndex(t.shape(), [&](const auto& idx) { before.push_back(t.GetDouble(idx)); });
  BuiltinCall call = MakeCall("neg", ElemType::kF64);
  call.metadata = *EncodeKernelMetadata({t.buffer_len(), t.buffer_len()}, {t.layout(), t.layout()});
  ASSERT_TRUE(RunBuiltinCpu(call, {t.buffer(), t.buffer()}).ok());
  size_t i = 0;
  ForEachIndex(t.shape(), [&](const auto& idx) { EXPECT_EQ(t.GetDouble(idx), -before[i++]); });
}

TEST(UnaryTest, LargeTensorRunsInParallelCorrectly) {
  TestTensor in(ElemType::kF32, {300, 1001}), out(ElemType::kF32, {300, 1001}, Layout::kPadded);
  in.FillRandom(3);
  ASSERT_TRUE(RunKernel(MakeCall("abs", ElemType::kF32), {&in, &out}).ok());
  ForEachIndex(in.shape(), [&](const auto& idx) {
    ASSERT_EQ(out.Get<float>(idx), std::fabs(in.Get<float>(idx)));
  });
}

}  // namespace
}  // namespace cubed::kernels::testing
