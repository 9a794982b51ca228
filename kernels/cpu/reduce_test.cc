#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/test_tensor.h"

namespace cubed::kernels::testing {
namespace {

const std::vector<ElemType>& kAll = kNumeric;

// Reduces `in` along `axis` at the output index `idx` (idx[axis] == 0), in double.
double Ref(const std::string& op, const TestTensor& in, std::vector<uint64_t> idx, uint32_t axis) {
  const uint64_t len = in.shape()[axis];
  double acc = op == "max" || op == "argmax" ? -INFINITY : op == "min" ? INFINITY : 0;
  double best_index = 0;
  for (uint64_t k = 0; k < len; ++k) {
    idx[axis] = k;
    const double x = in.GetDouble(idx);
    if (op == "sum" || op == "mean") acc += x;
    if (op == "max") acc = std::max(acc, x);
    if (op == "min") acc = std::min(acc, x);
    if (op == "argmax" && (k == 0 || x > acc)) {
      acc = x;
      best_index = static_cast<double>(k);
    }
  }
  if (op == "mean") return acc / static_cast<double>(len);
  if (op == "argmax") return best_index;
  return acc;
}

TEST(ReduceTest, EveryOpDtypeAndAxisMatchesReference) {
  const std::vector<std::vector<uint64_t>> shapes = {{1},       {7},          {1023},   {3, 5},
                                                     {2, 3, 4}, {2, 3, 4, 5}, {1, 7, 1}};
  const std::vector<std::pair<Layout, Layout>> layouts = {
      {Layout::kContiguous, Layout::kContiguous},
      {Layout::kPadded, Layout::kStepped},
      {Layout::kColumnMajor, Layout::kPadded}};
  uint64_t seed = 1000;
  for (const std::string op : {"sum", "max", "min", "mean", "argmax"}) {
    const bool float_only = op == "mean";
    for (ElemType dt : kAll) {
      if (float_only && !IsFloat(dt)) continue;
      const ElemType out_dt = op == "argmax" ? ElemType::kI64 : dt;
      for (const auto& shape : shapes) {
        for (uint32_t axis = 0; axis < shape.size(); ++axis) {
          for (const auto& [in_layout, out_layout] : layouts) {
            std::vector<uint64_t> out_shape = shape;
            out_shape[axis] = 1;
            TestTensor in(dt, shape, in_layout), out(out_dt, out_shape, out_layout);
            in.FillRandom(seed++);
            BuiltinCall call = MakeCall(op, dt);
            call.axis = axis;
            ASSERT_TRUE(RunKernel(call, {&in, &out}).ok()) << op << " " << DtypeName(dt);
            ForEachIndex(out_shape, [&](const std::vector<uint64_t>& idx) {
              const double want =
                  op == "argmax" ? Ref(op, in, idx, axis) : RoundTo(Ref(op, in, idx, axis), dt);
              // f32 sums accumulate in double: only the final rounding differs.
              ASSERT_TRUE(Close(out.GetDouble(idx), want, out_dt))
                  << op << " " << DtypeName(dt) << " axis " << axis << " got " << out.GetDouble(idx)
                  << " want " << want;
            });
            ASSERT_TRUE(out.PaddingIntact());
          }
        }
      }
    }
  }
}

TEST(ReduceTest, LargeReductionsAlongEachAxis) {
  TestTensor in(ElemType::kF32, {129, 1025});
  in.FillRandom(9);
  for (uint32_t axis = 0; axis < 2; ++axis) {
    std::vector<uint64_t> out_shape = {129, 1025};
    out_shape[axis] = 1;
    TestTensor out(ElemType::kF32, out_shape);
    BuiltinCall call = MakeCall("sum", ElemType::kF32);
    call.axis = axis;
    ASSERT_TRUE(RunKernel(call, {&in, &out}).ok());
    ForEachIndex(out_shape, [&](const auto& idx) {
      ASSERT_TRUE(Close(out.GetDouble(idx), Ref("sum", in, idx, axis), ElemType::kF32));
    });
  }
}

// Note [Split CPU reduction]: long axes are cut into slices folded on every thread.
TEST(ReduceTest, LongAxesSplitAcrossThreadsMatchTheReference) {
  struct Shape {
    std::vector<uint64_t> shape;
    uint32_t axis;
    Layout layout;
  };
  const std::vector<Shape> shapes = {{{140001}, 0, Layout::kContiguous},
                                     {{2, 140003}, 1, Layout::kPadded},
                                     {{140000, 2}, 0, Layout::kContiguous}};
  uint64_t seed = 77;
  for (const std::string op : {"sum", "max", "min", "mean", "argmax"}) {
    for (ElemType dt : {ElemType::kF32, ElemType::kF64, ElemType::kI64}) {
      if (op == "mean" && !IsFloat(dt)) continue;
      const ElemType out_dt = op == "argmax" ? ElemType::kI64 : dt;
      for (const Shape& s : shapes) {
        std::vector<uint64_t> out_shape = s.shape;
        out_shape[s.axis] = 1;
        TestTensor in(dt, s.shape, s.layout), out(out_dt, out_shape);
        in.FillRandom(seed++);
        BuiltinCall call = MakeCall(op, dt);
        call.axis = s.axis;
        ASSERT_TRUE(RunKernel(call, {&in, &out}).ok()) << op << " " << DtypeName(dt);
        ForEachIndex(out_shape, [&](const std::vector<uint64_t>& idx) {
          const double want = Ref(op, in, idx, s.axis);
          ASSERT_TRUE(Close(out.GetDouble(idx), want, out_dt))
              << op << " " << DtypeName(dt) << " shape[0] " << s.shape[0] << " got "
              << out.GetDouble(idx) << " want " << want;
        });
      }
    }
  }
}

TEST(ReduceTest, SplitArgmaxKeepsTheFirstMaximumAndTheFirstNan) {
  TestTensor in(ElemType::kF32, {300001}), out(ElemType::kI64, {1}), mx(ElemType::kF32, {1});
  in.FillRandom(5);
  in.Set<float>({250000}, 10.f);  // Slices of 65536: the maxima lie in slices 3 and 2.
  in.Set<float>({200000}, 10.f);
  in.Set<float>({260000}, 10.f);
  BuiltinCall call = MakeCall("argmax", ElemType::kF32);
  ASSERT_TRUE(RunKernel(call, {&in, &out}).ok());
  EXPECT_EQ(out.Get<int64_t>({0}), 200000);
  in.Set<float>({280000}, std::nanf(""));
  in.Set<float>({150000}, std::nanf(""));
  ASSERT_TRUE(RunKernel(call, {&in, &out}).ok());
  EXPECT_EQ(out.Get<int64_t>({0}), 150000);
  call.name = "max";
  ASSERT_TRUE(RunKernel(call, {&in, &mx}).ok());
  EXPECT_TRUE(std::isnan(mx.Get<float>({0})));
}

TEST(ReduceTest, IntegerSumWraps) {
  TestTensor in(ElemType::kI32, {3}), out(ElemType::kI32, {1});
  in.Set<int32_t>({0}, std::numeric_limits<int32_t>::max());
  in.Set<int32_t>({1}, 1);
  in.Set<int32_t>({2}, 1);
  ASSERT_TRUE(RunKernel(MakeCall("sum", ElemType::kI32), {&in, &out}).ok());
  EXPECT_EQ(out.Get<int32_t>({0}), std::numeric_limits<int32_t>::min() + 1);
}

TEST(ReduceTest, ArgmaxTakesFirstMaximumAndFirstNan) {
  TestTensor in(ElemType::kF32, {2, 5}), out(ElemType::kI64, {2, 1});
  const float nan = std::nanf("");
  const float rows[2][5] = {{1, 3, 2, 3, 0}, {1, nan, 9, nan, 2}};
  for (uint64_t r = 0; r < 2; ++r) {
    for (uint64_t c = 0; c < 5; ++c) in.Set<float>({r, c}, rows[r][c]);
  }
  BuiltinCall call = MakeCall("argmax", ElemType::kF32);
  call.axis = 1;
  ASSERT_TRUE(RunKernel(call, {&in, &out}).ok());
  EXPECT_EQ(out.Get<int64_t>({0, 0}), 1);
  EXPECT_EQ(out.Get<int64_t>({1, 0}), 1);
  TestTensor mx(ElemType::kF32, {2, 1});
  call.name = "max";
  ASSERT_TRUE(RunKernel(call, {&in, &mx}).ok());
  EXPECT_EQ(mx.Get<float>({0, 0}), 3.f);
  EXPECT_TRUE(std::isnan(mx.Get<float>({1, 0})));
}

TEST(ReduceTest, EmptyAxisSumsToZeroAndMeansNan) {
  TestTensor in(ElemType::kF64, {3, 0}), out(ElemType::kF64, {3, 1});
  BuiltinCall call = MakeCall("sum", ElemType::kF64);
  call.axis = 1;
  ASSERT_TRUE(RunKernel(call, {&in, &out}).ok());
  EXPECT_EQ(out.Get<double>({2, 0}), 0.0);
  call.name = "mean";
  ASSERT_TRUE(RunKernel(call, {&in, &out}).ok());
  EXPECT_TRUE(std::isnan(out.Get<double>({2, 0})));
}

}  // namespace
}  // namespace cubed::kernels::testing
