#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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

// The activations as PyTorch writes them (torch.nn.functional.gelu, approximate='none' and
// 'tanh'; silu), in double, with the limits at +-inf (the formulas give NaN at -inf).
double GeluRef(double x) {
  if (std::isinf(x)) return x > 0 ? x : -0.0;
  return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
}
double GeluTanhRef(double x) {
  if (std::isinf(x)) return x > 0 ? x : -0.0;
  const double u = std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1 + std::tanh(u));
}
double SiluRef(double x) {
  if (std::isinf(x)) return x > 0 ? x : -0.0;
  return x / (1 + std::exp(-x));
}

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
      {"gelu", kFloats, -6, 6, GeluRef},
      {"gelu_tanh", kFloats, -6, 6, GeluTanhRef},
      {"silu", kFloats, -20, 20, SiluRef},
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

// Runs `name` on `values` stored as `dt`; the outputs as doubles.
std::vector<double> RunOn(const std::string& name, ElemType dt, const std::vector<double>& values) {
  TestTensor in(dt, {values.size()}), out(dt, {values.size()}, Layout::kStepped);
  for (uint64_t i = 0; i < values.size(); ++i) in.SetDouble({i}, values[i]);
  EXPECT_TRUE(RunKernel(MakeCall(name, dt), {&in, &out}).ok()) << name;
  std::vector<double> r;
  for (uint64_t i = 0; i < values.size(); ++i) r.push_back(out.GetDouble({i}));
  return r;
}

TEST(UnaryTest, ActivationsOfEdgeValuesMatchTheDoubleReference) {
  const double inf = std::numeric_limits<double>::infinity();
  struct Activation {
    std::string name;
    double (*ref)(double);
  };
  for (const Activation& a :
       std::vector<Activation>{{"gelu", GeluRef}, {"gelu_tanh", GeluTanhRef}, {"silu", SiluRef}}) {
    for (ElemType dt : kFloats) {
      SCOPED_TRACE(absl::StrCat(a.name, " ", DtypeName(dt)));
      const double denorm = dt == ElemType::kF32   ? std::numeric_limits<float>::denorm_min()
                            : dt == ElemType::kF64 ? std::numeric_limits<double>::denorm_min()
                            : dt == ElemType::kF16 ? std::ldexp(1.0, -24)
                                                   : std::ldexp(1.0, -133);
      const double big = dt == ElemType::kF32   ? std::numeric_limits<float>::max()
                         : dt == ElemType::kF64 ? std::numeric_limits<double>::max()
                         : dt == ElemType::kF16 ? 65504.0
                                                : 3.3895313892515355e38;
      const std::vector<double> values = {std::nan(""), inf,        -inf, -0.0,  0.0, denorm,
                                          -denorm,      4 * denorm, big,  -big,  1.0, -1.0,
                                          3.0,          -3.0,       -0.5, 0.125, 9.0, -9.0};
      // The inputs as stored (halves round), so the reference sees what the kernel saw.
      std::vector<double> stored;
      for (double v : values) stored.push_back(RoundTo(v, dt));
      const std::vector<double> got = RunOn(a.name, dt, values);
      for (size_t i = 0; i < values.size(); ++i) {
        const double want = RoundTo(a.ref(stored[i]), dt);
        EXPECT_TRUE(Close(got[i], want, dt))
            << "x = " << stored[i] << ": got " << got[i] << ", want " << want;
        if (want == 0 && !std::isnan(got[i])) {
          EXPECT_EQ(std::signbit(got[i]), std::signbit(want)) << "x = " << stored[i];
        }
      }
    }
  }
}

// Note [Activation tails]: far below 0 the result is tiny but not 0, and keeps its relative
// accuracy (1 + erf(x / sqrt 2) would cancel to 0 long before).
TEST(UnaryTest, ActivationTailsKeepTheirRelativeAccuracy) {
  auto gelu = [](double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); };
  auto gelu_tanh = [](double x) {
    const double u = std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x);
    return x * std::exp(2 * u) / (1 + std::exp(2 * u));
  };
  auto silu = [](double x) { return x * std::exp(x) / (1 + std::exp(x)); };
  for (ElemType dt : {ElemType::kF32, ElemType::kF64}) {
    const std::vector<double> xs = {-5.0, -7.0, -9.0};
    const std::vector<double> g = RunOn("gelu", dt, xs), t = RunOn("gelu_tanh", dt, {-5.0, -9.0});
    const std::vector<double> s = RunOn("silu", dt, {-30.0, -80.0});
    // f32: the rounding of the argument moves a tail value by up to ~2 z^2 ulps (erfc(z) there
    // falls like e^(-z^2)); cancellation would be off by 100%.
    const double rel = dt == ElemType::kF32 ? 1e-4 : 1e-12;
    for (size_t i = 0; i < xs.size(); ++i) {
      EXPECT_NEAR(g[i] / gelu(xs[i]), 1.0, rel) << DtypeName(dt) << " gelu(" << xs[i] << ")";
    }
    EXPECT_NEAR(t[0] / gelu_tanh(-5.0), 1.0, rel) << DtypeName(dt);
    EXPECT_NEAR(t[1] / gelu_tanh(-9.0), 1.0, rel) << DtypeName(dt);
    EXPECT_NEAR(s[0] / silu(-30.0), 1.0, rel) << DtypeName(dt);
    EXPECT_NEAR(s[1] / silu(-80.0), 1.0, rel) << DtypeName(dt);
  }
}

TEST(UnaryTest, ActivationsRefuseNonFloatTypes) {
  for (const char* name : {"gelu", "gelu_tanh", "silu"}) {
    for (ElemType dt : {ElemType::kI32, ElemType::kU8, ElemType::kBool}) {
      TestTensor in(dt, {3}), out(dt, {3});
      const absl::Status s = RunKernel(MakeCall(name, dt), {&in, &out});
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << name;
      EXPECT_EQ(s.message(), absl::StrCat("kernel '", name, "' does not support dtype ",
                                          ElemTypeName(dt), " (supported: f32, f64, f16, bf16)"));
    }
  }
}

TEST(UnaryTest, RunsInPlace) {
  TestTensor t(ElemType::kF64, {5, 9}, Layout::kPadded);
  t.FillRandom(7);
  std::vector<double> before;
  ForEachIndex(t.shape(), [&](const auto& idx) { before.push_back(t.GetDouble(idx)); });
  BuiltinCall call = MakeCall("neg", ElemType::kF64);
  call.metadata = kernels::ToMetadataWords(
      *EncodeKernelMetadata({t.buffer_len(), t.buffer_len()}, {t.layout(), t.layout()}));
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
