#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/test_tensor.h"

namespace cubed::kernels::testing {
namespace {

const std::vector<ElemType>& kAll = kEveryType;

TEST(FillTest, EveryDtypeAndLayout) {
  for (ElemType dt : kAll) {
    for (Layout l :
         {Layout::kContiguous, Layout::kPadded, Layout::kColumnMajor, Layout::kStepped}) {
      for (const std::vector<uint64_t>& shape :
           std::vector<std::vector<uint64_t>>{{}, {1023}, {3, 7}, {2, 3, 1, 5}}) {
        TestTensor out(dt, shape, l);
        BuiltinCall call = MakeCall("fill", dt);
        call.scalars.push_back(OneScalar(dt, 42));
        ASSERT_TRUE(RunKernel(call, {&out}).ok());
        const double want = dt == ElemType::kBool ? 1.0 : 42.0;
        ForEachIndex(shape, [&](const auto& idx) { ASSERT_EQ(out.GetDouble(idx), want); });
        ASSERT_TRUE(out.PaddingIntact());
      }
    }
  }
}

TEST(CopyTest, StridedToContiguousAndBackForEveryDtype) {
  uint64_t seed = 4000;
  for (ElemType dt : kAll) {
    for (const std::vector<uint64_t>& shape :
         std::vector<std::vector<uint64_t>>{{7}, {1023}, {5, 3}, {2, 3, 4}, {3, 1, 2, 5}}) {
      for (const auto& [li, lo] :
           std::vector<std::pair<Layout, Layout>>{{Layout::kColumnMajor, Layout::kContiguous},
                                                  {Layout::kPadded, Layout::kContiguous},
                                                  {Layout::kContiguous, Layout::kStepped},
                                                  {Layout::kContiguous, Layout::kContiguous}}) {
        TestTensor in(dt, shape, li), out(dt, shape, lo);
        in.FillRandom(seed++);
        ASSERT_TRUE(RunKernel(MakeCall("copy", dt), {&in, &out}).ok());
        ForEachIndex(shape,
                     [&](const auto& idx) { ASSERT_EQ(out.GetDouble(idx), in.GetDouble(idx)); });
        ASSERT_TRUE(out.PaddingIntact());
      }
    }
  }
}

TEST(CastTest, EveryPairOfDtypes) {
  uint64_t seed = 5000;
  for (ElemType from : kAll) {
    for (ElemType to : kAll) {
      TestTensor in(from, {4, 33}, Layout::kPadded), out(to, {4, 33}, Layout::kColumnMajor);
      in.FillRandom(seed++, -100, 100);
      BuiltinCall call = MakeCall("cast", from);
      call.out_dtype = to;
      ASSERT_TRUE(RunKernel(call, {&in, &out}).ok());
      ForEachIndex(in.shape(), [&](const auto& idx) {
        const double x = in.GetDouble(idx);
        double want = x;
        if (!IsFloat(to)) want = std::trunc(x);
        // Saturates from floats (x in [-100, 100] fits every signed type), wraps from integers.
        if (!IsSigned(to) && want < 0 && IsFloat(from)) want = 0;
        want = RoundTo(want, to);
        if (to == ElemType::kBool) want = x != 0 ? 1 : 0;
        ASSERT_TRUE(Close(out.GetDouble(idx), want, to))
            << DtypeName(from) << "->" << DtypeName(to) << " " << x << " gave "
            << out.GetDouble(idx);
      });
    }
  }
}

TEST(CastTest, FloatToIntegerSaturatesAndMapsNanToZero) {
  TestTensor in(ElemType::kF64, {6}), i32(ElemType::kI32, {6}), u32(ElemType::kU32, {6}),
      i64(ElemType::kI64, {6}), f32(ElemType::kF32, {6});
  const double values[6] = {std::nan(""), 1e10, -1e10, -5.5, 1e300, 3e9};
  for (uint64_t i = 0; i < 6; ++i) in.Set<double>({i}, values[i]);
  BuiltinCall call = MakeCall("cast", ElemType::kF64);
  call.out_dtype = ElemType::kI32;
  ASSERT_TRUE(RunKernel(call, {&in, &i32}).ok());
  EXPECT_EQ(i32.Get<int32_t>({0}), 0);
  EXPECT_EQ(i32.Get<int32_t>({1}), std::numeric_limits<int32_t>::max());
  EXPECT_EQ(i32.Get<int32_t>({2}), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(i32.Get<int32_t>({3}), -5);
  call.out_dtype = ElemType::kU32;
  ASSERT_TRUE(RunKernel(call, {&in, &u32}).ok());
  EXPECT_EQ(u32.Get<uint32_t>({3}), 0u);
  EXPECT_EQ(u32.Get<uint32_t>({5}), 3000000000u);
  call.out_dtype = ElemType::kI64;
  ASSERT_TRUE(RunKernel(call, {&in, &i64}).ok());
  EXPECT_EQ(i64.Get<int64_t>({4}), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(i64.Get<int64_t>({1}), 10000000000);
  call.out_dtype = ElemType::kF32;
  ASSERT_TRUE(RunKernel(call, {&in, &f32}).ok());
  EXPECT_EQ(f32.Get<float>({4}), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(f32.Get<float>({0})));
}

TEST(CastTest, IntegerNarrowingWraps) {
  TestTensor in(ElemType::kI64, {2}), out(ElemType::kI32, {2});
  in.Set<int64_t>({0}, (int64_t{1} << 32) + 5);
  in.Set<int64_t>({1}, -1);
  BuiltinCall call = MakeCall("cast", ElemType::kI64);
  call.out_dtype = ElemType::kI32;
  ASSERT_TRUE(RunKernel(call, {&in, &out}).ok());
  EXPECT_EQ(out.Get<int32_t>({0}), 5);
  EXPECT_EQ(out.Get<int32_t>({1}), -1);
  TestTensor u(ElemType::kU32, {2});
  call.out_dtype = ElemType::kU32;
  ASSERT_TRUE(RunKernel(call, {&in, &u}).ok());
  EXPECT_EQ(u.Get<uint32_t>({1}), 4294967295u);
}

}  // namespace
}  // namespace cubed::kernels::testing
