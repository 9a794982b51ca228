// layer_norm and rms_norm on the CPU against a long-double reference: every float type, strided
// and transposed rows, every affine variant, the edge rows docs/kernel-abi.md defines, long rows
// split over threads and in-place calls.

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cpu/test_tensor.h"

namespace cubed::kernels::testing {
namespace {

// One catalogue row: layer_norm or rms_norm with 0, 1 (weight) or 2 (weight, bias) affine inputs.
struct Variant {
  std::string name;
  int affine;
};
const std::vector<Variant> kVariants = {
    {"layer_norm", 0}, {"layer_norm", 1}, {"layer_norm", 2}, {"rms_norm", 0}, {"rms_norm", 1}};

BuiltinCall NormCall(const std::string& name, ElemType dt, double eps = 1e-5,
                     ElemType eps_type = ElemType::kF64) {
  BuiltinCall call = MakeCall(name, dt);
  call.scalars.push_back(OneScalar(eps_type, eps));
  return call;
}

// The expected outputs of one row, computed in long double from the stored inputs. `w` and `b`
// are empty when not bound.
std::vector<double> Reference(bool center, const std::vector<double>& x,
                              const std::vector<double>& w, const std::vector<double>& b,
                              double eps) {
  const size_t n = x.size();
  long double mean = 0, var = 0;
  if (center) {
    for (double v : x) mean += v;
    mean /= n;
  }
  for (double v : x) var += (v - mean) * (v - mean);
  var /= n;
  const long double rstd = 1.0L / std::sqrt(var + eps);
  std::vector<double> y(n);
  for (size_t i = 0; i < n; ++i) {
    long double v = (x[i] - mean) * rstd;
    if (!w.empty()) v *= w[i];
    if (!b.empty()) v += b[i];
    y[i] = static_cast<double>(v);
  }
  return y;
}

// The tensors of one call: in, the affine inputs, out (as RunKernel takes them).
struct NormTensors {
  TestTensor in, weight, bias, out;
  std::vector<TestTensor*> Bound(int affine) {
    std::vector<TestTensor*> t = {&in};
    if (affine >= 1) t.push_back(&weight);
    if (affine >= 2) t.push_back(&bias);
    t.push_back(&out);
    return t;
  }
};

NormTensors MakeTensors(ElemType dt, const std::vector<uint64_t>& shape, Layout in_layout,
                        Layout out_layout, uint64_t seed) {
  const uint64_t len = shape.back();
  NormTensors t{TestTensor(dt, shape, in_layout), TestTensor(dt, {len}, Layout::kStepped),
                TestTensor(dt, {len}), TestTensor(dt, shape, out_layout)};
  t.in.FillRandom(seed, -3, 5);
  t.weight.FillRandom(seed + 1, -2, 2);
  t.bias.FillRandom(seed + 2, -1, 1);
  return t;
}

// Checks every row of `t.out` against Reference; `rel` as Close's (0: its default).
void ExpectRowsMatch(const Variant& v, NormTensors& t, double eps, double rel = 0) {
  const std::vector<uint64_t>& shape = t.in.shape();
  const uint64_t len = shape.back();
  std::vector<double> w, b;
  for (uint64_t i = 0; i < len && v.affine >= 1; ++i) w.push_back(t.weight.GetDouble({i}));
  for (uint64_t i = 0; i < len && v.affine >= 2; ++i) b.push_back(t.bias.GetDouble({i}));
  std::vector<uint64_t> rows = shape;
  rows.back() = 1;
  ForEachIndex(rows, [&](std::vector<uint64_t> idx) {
    std::vector<double> x;
    for (uint64_t i = 0; i < len; ++i) {
      idx.back() = i;
      x.push_back(t.in.GetDouble(idx));
    }
    const std::vector<double> want = Reference(v.name == "layer_norm", x, w, b, eps);
    for (uint64_t i = 0; i < len; ++i) {
      idx.back() = i;
      const double got = t.out.GetDouble(idx);
      ASSERT_TRUE(Close(got, want[i], t.out.dtype(), rel))
          << v.name << "/" << v.affine << " " << DtypeName(t.out.dtype()) << " element " << i
          << " of a row of " << len << ": got " << got << ", want " << want[i];
    }
  });
  EXPECT_TRUE(t.out.PaddingIntact());
}

TEST(NormTest, RowsMatchTheReferenceForEveryTypeLayoutAndAffineVariant) {
  const std::vector<std::vector<uint64_t>> shapes = {{1},    {7},        {1023},
                                                     {3, 5}, {2, 3, 64}, {2, 1, 3, 5}};
  const std::vector<std::pair<Layout, Layout>> layouts = {
      {Layout::kContiguous, Layout::kContiguous},
      {Layout::kColumnMajor, Layout::kPadded},
      {Layout::kPadded, Layout::kStepped}};
  uint64_t seed = 5000;
  for (const Variant& v : kVariants) {
    for (ElemType dt : kFloatTypes) {
      for (const auto& shape : shapes) {
        for (const auto& [li, lo] : layouts) {
          NormTensors t = MakeTensors(dt, shape, li, lo, seed += 3);
          const absl::Status s = RunKernel(NormCall(v.name, dt), t.Bound(v.affine));
          ASSERT_TRUE(s.ok()) << s;
          ExpectRowsMatch(v, t, 1e-5);
          ASSERT_TRUE(t.in.PaddingIntact());
        }
      }
    }
  }
}

TEST(NormTest, EpsMayBeF32OrF64AndZero) {
  for (const Variant& v : kVariants) {
    for (ElemType eps_type : {ElemType::kF32, ElemType::kF64}) {
      for (double eps : {0.0, 0.5}) {
        NormTensors t =
            MakeTensors(ElemType::kF32, {4, 9}, Layout::kContiguous, Layout::kContiguous, 77);
        ASSERT_TRUE(
            RunKernel(NormCall(v.name, ElemType::kF32, eps, eps_type), t.Bound(v.affine)).ok());
        ExpectRowsMatch(v, t, eps);
      }
    }
  }
}

// Two-pass statistics: rows far from zero keep their small variance, even for halves computing in
// f32 (E[x^2] - E[x]^2 in f32 would lose it: 1000^2 has an f32 ulp of 0.06).
TEST(NormTest, RowsFarFromZeroKeepTheirVariance) {
  for (ElemType dt : kFloatTypes) {
    const double offset = dt == ElemType::kBF16 ? 1000 : dt == ElemType::kF16 ? 1000 : 1e6;
    const double spread = dt == ElemType::kBF16 ? 32 : 4;
    TestTensor in(dt, {3, 500}), out(dt, {3, 500});
    in.FillRandom(9, offset - spread, offset + spread);
    ASSERT_TRUE(RunKernel(NormCall("layer_norm", dt), {&in, &out}).ok());
    TestTensor w(dt, {500}), b(dt, {500});
    NormTensors t{in, w, b, out};
    // f64's own rounding of x - mean is relative to the offset: 1e6 / 2.3 * 2^-53 = 5e-11.
    ExpectRowsMatch({"layer_norm", 0}, t, 1e-5, dt == ElemType::kF64 ? 1e-9 : 0);
  }
}

TEST(NormTest, EdgeRows) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (ElemType dt : kFloatTypes) {
    SCOPED_TRACE(DtypeName(dt));
    // Rows: a NaN, +inf, constant 3.25, and a size-1 row (below, its own tensor).
    TestTensor in(dt, {3, 4}), w(dt, {4}), b(dt, {4}), out(dt, {3, 4}), rms(dt, {3, 4});
    const double rows[3][4] = {{1, nan, 2, 3}, {1, inf, 2, 3}, {3.25, 3.25, 3.25, 3.25}};
    for (uint64_t r = 0; r < 3; ++r) {
      for (uint64_t i = 0; i < 4; ++i) in.SetDouble({r, i}, rows[r][i]);
    }
    for (uint64_t i = 0; i < 4; ++i) {
      w.SetDouble({i}, 2.0);
      b.SetDouble({i}, 0.5 + static_cast<double>(i));
    }
    ASSERT_TRUE(RunKernel(NormCall("layer_norm", dt), {&in, &w, &b, &out}).ok());
    ASSERT_TRUE(RunKernel(NormCall("rms_norm", dt), {&in, &w, &rms}).ok());
    for (uint64_t i = 0; i < 4; ++i) {
      // A NaN or an infinity makes the mean non-finite: the whole layer_norm row is NaN.
      EXPECT_TRUE(std::isnan(out.GetDouble({0, i}))) << i;
      EXPECT_TRUE(std::isnan(out.GetDouble({1, i}))) << i;
      // A constant row has mean equal to its value and variance 0 exactly: out = bias.
      EXPECT_EQ(out.GetDouble({2, i}), 0.5 + static_cast<double>(i)) << i;
      // rms_norm: NaN spreads over the row; +inf gives rstd 0, so 0 at the finite elements and
      // NaN (inf * 0) at the infinite one; a constant c gives c / sqrt(c^2 + eps) * w.
      EXPECT_TRUE(std::isnan(rms.GetDouble({0, i}))) << i;
      if (i == 1) {
        EXPECT_TRUE(std::isnan(rms.GetDouble({1, i})));
      } else {
        EXPECT_EQ(rms.GetDouble({1, i}), 0.0) << i;
      }
      EXPECT_TRUE(Close(rms.GetDouble({2, i}), 2 * 3.25 / std::sqrt(3.25 * 3.25 + 1e-5), dt));
    }
    // Size-1 rows: layer_norm gives the bias (x - mean is 0), rms_norm x / sqrt(x^2 + eps) * w.
    TestTensor one(dt, {3, 1}), w1(dt, {1}), b1(dt, {1}), out1(dt, {3, 1}), rms1(dt, {3, 1});
    one.SetDouble({0, 0}, -5.0);
    one.SetDouble({1, 0}, 0.0);
    one.SetDouble({2, 0}, 1e-3);
    w1.SetDouble({0}, 3.0);
    b1.SetDouble({0}, -0.25);
    ASSERT_TRUE(RunKernel(NormCall("layer_norm", dt), {&one, &w1, &b1, &out1}).ok());
    ASSERT_TRUE(RunKernel(NormCall("rms_norm", dt), {&one, &w1, &rms1}).ok());
    for (uint64_t r = 0; r < 3; ++r) {
      EXPECT_EQ(out1.GetDouble({r, 0}), -0.25) << r;
      const double x = one.GetDouble({r, 0});
      EXPECT_TRUE(Close(rms1.GetDouble({r, 0}), 3 * x / std::sqrt(x * x + 1e-5), dt))
          << r << ": " << rms1.GetDouble({r, 0});
    }
    // eps = 0: a constant row is 0 / 0 = NaN (as in torch), an all-zero rms_norm row too.
    TestTensor zeros(dt, {1, 3}), nan_out(dt, {1, 3});
    for (uint64_t i = 0; i < 3; ++i) zeros.SetDouble({0, i}, 0.0);
    ASSERT_TRUE(RunKernel(NormCall("layer_norm", dt, 0.0), {&in, &out}).ok());
    ASSERT_TRUE(RunKernel(NormCall("rms_norm", dt, 0.0), {&zeros, &nan_out}).ok());
    EXPECT_TRUE(std::isnan(out.GetDouble({2, 0})));
    EXPECT_TRUE(std::isnan(nan_out.GetDouble({0, 0})));
  }
}

TEST(NormTest, EmptyTensorsWriteNothing) {
  for (const Variant& v : kVariants) {
    for (const std::vector<uint64_t>& shape :
         std::vector<std::vector<uint64_t>>{{3, 0}, {0, 5}, {0}, {2, 0, 4}}) {
      NormTensors t =
          MakeTensors(ElemType::kF32, shape, Layout::kContiguous, Layout::kContiguous, 1);
      const absl::Status s = RunKernel(NormCall(v.name, ElemType::kF32), t.Bound(v.affine));
      ASSERT_TRUE(s.ok()) << s;
      EXPECT_TRUE(t.out.PaddingIntact());
    }
  }
}

// Note [Long softmax rows] in softmax.cc, applied to the norms: one row longer than two slices
// (fewer rows than threads), strided or in place, matches the reference.
TEST(NormTest, LongRowsSplitAcrossThreadsMatchTheReference) {
  uint64_t seed = 6000;
  for (const Variant& v : {Variant{"layer_norm", 2}, Variant{"rms_norm", 1}}) {
    for (ElemType dt : kFloatTypes) {
      for (const auto& [shape, layout] : std::vector<std::pair<std::vector<uint64_t>, Layout>>{
               {{1, 300001}, Layout::kContiguous}, {{2, 140000}, Layout::kPadded}}) {
        NormTensors t = MakeTensors(dt, shape, layout, Layout::kContiguous, seed += 3);
        ASSERT_TRUE(RunKernel(NormCall(v.name, dt), t.Bound(v.affine)).ok());
        ExpectRowsMatch(v, t, 1e-5);
        // In place: the output is the input's memory with its layout; the same results.
        if (layout != Layout::kContiguous) continue;
        TestTensor same = t.in;
        std::vector<TestTensor*> bound = t.Bound(v.affine);
        bound.front() = bound.back() = &same;
        ASSERT_TRUE(RunKernel(NormCall(v.name, dt), bound).ok());
        for (uint64_t i = 0; i < shape[1]; i += 991) {
          ASSERT_EQ(same.GetDouble({0, i}), t.out.GetDouble({0, i})) << DtypeName(dt) << " " << i;
        }
      }
    }
  }
}

TEST(NormTest, RunsInPlaceOnManyRows) {
  for (const Variant& v : kVariants) {
    NormTensors t = MakeTensors(ElemType::kF64, {3000, 17}, Layout::kPadded, Layout::kPadded, 31);
    TestTensor original = t.in;
    std::vector<TestTensor*> bound = t.Bound(v.affine);
    bound.back() = &t.in;
    ASSERT_TRUE(RunKernel(NormCall(v.name, ElemType::kF64), bound).ok());
    NormTensors check{original, t.weight, t.bias, t.in};
    ExpectRowsMatch(v, check, 1e-5);
  }
}

TEST(NormTest, RefusesOverlapOtherThanInPlace) {
  // The output may not be the weight's memory (a different layout).
  TestTensor in(ElemType::kF32, {2, 4}), out(ElemType::kF32, {2, 4});
  BuiltinCall call = NormCall("rms_norm", ElemType::kF32);
  call.metadata = kernels::ToMetadataWords(
      *EncodeKernelMetadata({8, 4, 8}, {in.layout(), TensorLayout::Contiguous({4}), out.layout()}));
  const HostBuffer o = out.buffer();
  const absl::Status s = RunBuiltinCpu(call, {in.buffer(), {o.data, 16}, o});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("overlaps buffer 1 (weight)"), std::string::npos) << s;
}

}  // namespace
}  // namespace cubed::kernels::testing
