// The rules of the 16-bit float, 8/16-bit integer and bool element types that the generic
// per-kernel tests (binary_test.cc, reduce_test.cc, ...) do not pin down: f32 accumulation of
// half types, one rounding on store, edge values through cast, bool semantics and the errors for
// combinations no kernel has.

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/half.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/test_tensor.h"

namespace cubed::kernels::testing {
namespace {

using ::testing::HasSubstr;

BuiltinCall Cast(ElemType from, ElemType to) {
  BuiltinCall call = MakeCall("cast", from);
  call.out_dtype = to;
  return call;
}

TEST(HalfTypesTest, SumAndMatmulOfHalvesAccumulateInF32) {
  // 4096 ones: an f16 accumulator would stop at 2048 (2048 + 1 rounds back to 2048).
  for (ElemType dt : {ElemType::kF16, ElemType::kBF16}) {
    TestTensor in(dt, {4096}), out(dt, {1});
    ForEachIndex({4096}, [&](const auto& idx) { in.SetDouble(idx, 1.0); });
    BuiltinCall sum = MakeCall("sum", dt);
    ASSERT_TRUE(RunKernel(sum, {&in, &out}).ok());
    EXPECT_EQ(out.GetDouble({0}), 4096.0) << DtypeName(dt);
    TestTensor a(dt, {1, 4096}), b(dt, {4096, 1}), c(dt, {1, 1});
    ForEachIndex({1, 4096}, [&](const auto& idx) { a.SetDouble(idx, 1.0); });
    ForEachIndex({4096, 1}, [&](const auto& idx) { b.SetDouble(idx, 1.0); });
    ASSERT_TRUE(RunKernel(MakeCall("matmul", dt), {&a, &b, &c}).ok());
    EXPECT_EQ(c.GetDouble({0, 0}), 4096.0) << DtypeName(dt);
  }
}

TEST(HalfTypesTest, ArithmeticRoundsOnceToNearestEven) {
  // 1 + 2^-11 is the f16 midpoint between 1 and 1 + 2^-10: ties to even (1).
  TestTensor a(ElemType::kF16, {2}), b(ElemType::kF16, {2}), out(ElemType::kF16, {2});
  a.SetDouble({0}, 1.0);
  b.SetDouble({0}, std::ldexp(1.0, -11));
  a.SetDouble({1}, 65504.0);
  b.SetDouble({1}, 32.0);  // 65536: past the midpoint 65520, so +inf.
  ASSERT_TRUE(RunKernel(MakeCall("add", ElemType::kF16), {&a, &b, &out}).ok());
  EXPECT_EQ(out.Get<uint16_t>({0}), 0x3c00);
  EXPECT_EQ(out.Get<uint16_t>({1}), 0x7c00);
}

TEST(HalfTypesTest, CastEdgeValues) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> values = {std::nan(""), inf, -inf, -0.0, 1e-8, 70000.0, -3.75, 1e300};
  TestTensor in(ElemType::kF64, {values.size()});
  for (uint64_t i = 0; i < values.size(); ++i) in.Set<double>({i}, values[i]);
  TestTensor h(ElemType::kF16, {values.size()}), bf(ElemType::kBF16, {values.size()});
  ASSERT_TRUE(RunKernel(Cast(ElemType::kF64, ElemType::kF16), {&in, &h}).ok());
  ASSERT_TRUE(RunKernel(Cast(ElemType::kF64, ElemType::kBF16), {&in, &bf}).ok());
  EXPECT_TRUE(std::isnan(h.GetDouble({0})));
  EXPECT_EQ(h.Get<uint16_t>({1}), 0x7c00);
  EXPECT_EQ(h.Get<uint16_t>({2}), 0xfc00);
  EXPECT_EQ(h.Get<uint16_t>({3}), 0x8000);  // -0 keeps its sign.
  EXPECT_EQ(h.Get<uint16_t>({4}), 0x0000);  // 1e-8 is below half the smallest subnormal.
  EXPECT_EQ(h.Get<uint16_t>({5}), 0x7c00);  // Past f16's range.
  EXPECT_EQ(h.GetDouble({6}), -3.75);
  EXPECT_EQ(h.Get<uint16_t>({7}), 0x7c00);
  EXPECT_EQ(bf.GetDouble({5}), 70144.0);  // 70000 to 8 significant bits.
  EXPECT_EQ(bf.Get<uint16_t>({7}), 0x7f80);
  EXPECT_NEAR(bf.GetDouble({4}), 1e-8, 1e-10);

  // Halves to integers saturate, NaN gives 0; to bool NaN is true and -0 false.
  TestTensor i8(ElemType::kI8, {values.size()}), u8(ElemType::kU8, {values.size()}),
      b8(ElemType::kBool, {values.size()});
  ASSERT_TRUE(RunKernel(Cast(ElemType::kF16, ElemType::kI8), {&h, &i8}).ok());
  ASSERT_TRUE(RunKernel(Cast(ElemType::kF16, ElemType::kU8), {&h, &u8}).ok());
  ASSERT_TRUE(RunKernel(Cast(ElemType::kF16, ElemType::kBool), {&h, &b8}).ok());
  const std::vector<int> want_i8 = {0, 127, -128, 0, 0, 127, -3, 127};
  const std::vector<int> want_u8 = {0, 255, 0, 0, 0, 255, 0, 255};
  const std::vector<int> want_b = {1, 1, 1, 0, 0, 1, 1, 1};
  for (uint64_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(i8.Get<int8_t>({i}), want_i8[i]) << i;
    EXPECT_EQ(u8.Get<uint8_t>({i}), want_u8[i]) << i;
    EXPECT_EQ(b8.Get<uint8_t>({i}), want_b[i]) << i;
  }
}

TEST(HalfTypesTest, IntegerLimitsWrapAndConvertExactly) {
  TestTensor a(ElemType::kI8, {3}), b(ElemType::kI8, {3}), out(ElemType::kI8, {3});
  a.Set<int8_t>({0}, 127);
  b.Set<int8_t>({0}, 1);
  a.Set<int8_t>({1}, -128);
  b.Set<int8_t>({1}, -1);
  a.Set<int8_t>({2}, -100);
  b.Set<int8_t>({2}, 100);
  ASSERT_TRUE(RunKernel(MakeCall("add", ElemType::kI8), {&a, &b, &out}).ok());
  EXPECT_EQ(out.Get<int8_t>({0}), -128);
  EXPECT_EQ(out.Get<int8_t>({1}), 127);
  ASSERT_TRUE(RunKernel(MakeCall("div", ElemType::kI8), {&a, &b, &out}).ok());
  EXPECT_EQ(out.Get<int8_t>({1}), -128);  // MIN / -1 is MIN.
  TestTensor u(ElemType::kU16, {1}), v(ElemType::kU16, {1}), w(ElemType::kU16, {1});
  u.Set<uint16_t>({0}, 65535);
  v.Set<uint16_t>({0}, 65535);
  ASSERT_TRUE(RunKernel(MakeCall("mul", ElemType::kU16), {&u, &v, &w}).ok());
  EXPECT_EQ(w.Get<uint16_t>({0}), 1);  // 65535^2 mod 2^16, with no signed overflow on the way.
  // i64 to bf16 rounds once from the integer: 2^31 + 2^23 + 1 goes up (through f32 it would not).
  TestTensor big(ElemType::kI64, {1}), bf(ElemType::kBF16, {1});
  big.Set<int64_t>({0}, (int64_t{1} << 31) + (1 << 23) + 1);
  ASSERT_TRUE(RunKernel(Cast(ElemType::kI64, ElemType::kBF16), {&big, &bf}).ok());
  EXPECT_EQ(bf.Get<uint16_t>({0}), 0x4f01);
}

TEST(HalfTypesTest, BoolIsOneByteAnyNonZeroTrue) {
  TestTensor a(ElemType::kBool, {4}), b(ElemType::kBool, {4}), out(ElemType::kBool, {4});
  const uint8_t av[4] = {0, 7, 0, 1}, bv[4] = {0, 0, 200, 1};
  for (uint64_t i = 0; i < 4; ++i) {
    a.Set<uint8_t>({i}, av[i]);
    b.Set<uint8_t>({i}, bv[i]);
  }
  ASSERT_TRUE(RunKernel(MakeCall("max", ElemType::kBool), {&a, &b, &out}).ok());  // or
  EXPECT_EQ(out.Get<uint8_t>({0}), 0);
  EXPECT_EQ(out.Get<uint8_t>({1}), 1);
  EXPECT_EQ(out.Get<uint8_t>({2}), 1);
  EXPECT_EQ(out.Get<uint8_t>({3}), 1);
  ASSERT_TRUE(RunKernel(MakeCall("min", ElemType::kBool), {&a, &b, &out}).ok());  // and
  EXPECT_EQ(out.Get<uint8_t>({1}), 0);
  EXPECT_EQ(out.Get<uint8_t>({3}), 1);
  TestTensor any(ElemType::kBool, {1}), f(ElemType::kF32, {4});
  ASSERT_TRUE(RunKernel(MakeCall("max", ElemType::kBool), {&a, &any}).ok());
  EXPECT_EQ(any.Get<uint8_t>({0}), 1);
  ASSERT_TRUE(RunKernel(MakeCall("min", ElemType::kBool), {&a, &any}).ok());
  EXPECT_EQ(any.Get<uint8_t>({0}), 0);
  ASSERT_TRUE(RunKernel(Cast(ElemType::kBool, ElemType::kF32), {&a, &f}).ok());
  EXPECT_EQ(f.Get<float>({1}), 1.0f);  // The byte 7 reads as true.
  // cast to bool writes 0 or 1 even from bool (dense: no byte copy); copy moves the bytes.
  TestTensor c(ElemType::kBool, {4}), d(ElemType::kBool, {4});
  ASSERT_TRUE(RunKernel(Cast(ElemType::kBool, ElemType::kBool), {&a, &c}).ok());
  EXPECT_EQ(c.Get<uint8_t>({1}), 1);
  ASSERT_TRUE(RunKernel(MakeCall("copy", ElemType::kBool), {&a, &d}).ok());
  EXPECT_EQ(d.Get<uint8_t>({1}), 7);
}

TEST(HalfTypesTest, EmptyAndSizeOneAxes) {
  for (ElemType dt : {ElemType::kF16, ElemType::kBF16}) {
    TestTensor empty(dt, {3, 0}), sum(dt, {3, 1}), mean(dt, {3, 1});
    BuiltinCall call = MakeCall("sum", dt);
    call.axis = 1;
    ASSERT_TRUE(RunKernel(call, {&empty, &sum}).ok());
    call.name = "mean";
    ASSERT_TRUE(RunKernel(call, {&empty, &mean}).ok());
    EXPECT_EQ(sum.GetDouble({1, 0}), 0.0);
    EXPECT_TRUE(std::isnan(mean.GetDouble({1, 0})));
    TestTensor one(dt, {2, 1}), soft(dt, {2, 1});
    one.SetDouble({0, 0}, -5.0);
    one.SetDouble({1, 0}, std::nan(""));
    ASSERT_TRUE(RunKernel(MakeCall("softmax", dt), {&one, &soft}).ok());
    EXPECT_EQ(soft.GetDouble({0, 0}), 1.0);
    EXPECT_TRUE(std::isnan(soft.GetDouble({1, 0})));
  }
}

TEST(HalfTypesTest, UnsupportedCombinationsNameTheKernelAndType) {
  struct Bad {
    std::string name;
    ElemType dtype;
    size_t buffers;
  };
  for (const Bad& bad : std::vector<Bad>{{"add", ElemType::kBool, 3},
                                         {"matmul", ElemType::kBool, 3},
                                         {"sum", ElemType::kBool, 2},
                                         {"exp", ElemType::kI8, 2},
                                         {"softmax", ElemType::kU16, 2},
                                         {"neg", ElemType::kU8, 2},
                                         {"mean", ElemType::kI16, 2}}) {
    std::vector<TestTensor> t;
    for (size_t i = 0; i < bad.buffers; ++i) t.emplace_back(bad.dtype, std::vector<uint64_t>{4});
    if (bad.name == "sum" || bad.name == "mean") t.back() = TestTensor(bad.dtype, {1});
    std::vector<TestTensor*> ptrs;
    for (TestTensor& x : t) ptrs.push_back(&x);
    if (bad.name == "matmul") {
      t[0] = TestTensor(bad.dtype, {2, 2});
      t[1] = TestTensor(bad.dtype, {2, 2});
      t[2] = TestTensor(bad.dtype, {2, 2});
    }
    BuiltinCall call = MakeCall(bad.name, bad.dtype);
    const absl::Status s = RunKernel(call, ptrs);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad.name;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr(absl::StrCat("kernel '", bad.name, "' does not support dtype ",
                                       ElemTypeName(bad.dtype))));
  }
}

}  // namespace
}  // namespace cubed::kernels::testing
