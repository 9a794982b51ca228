#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/test_tensor.h"

namespace cubed::kernels::testing {
namespace {

const std::vector<ElemType>& kAll = kNumeric;
const std::vector<ElemType>& kFloats = kFloatTypes;

double Ref(const std::string& op, double a, double b, ElemType t) {
  if (op == "add") return a + b;
  if (op == "sub") return a - b;
  if (op == "mul") return a * b;
  if (op == "div") {
    if (!IsFloat(t)) return b == 0 ? 0 : std::trunc(a / b);
    return a / b;
  }
  if (op == "max") return std::max(a, b);
  if (op == "min") return std::min(a, b);
  return std::pow(a, b);
}

struct Shapes {
  std::vector<uint64_t> out, lhs, rhs;
};

TEST(BinaryTest, EveryOpDtypeAndBroadcastMatchesReference) {
  const std::vector<Shapes> shapes = {
      {{}, {}, {}},
      {{1}, {1}, {1}},
      {{1023}, {1023}, {1023}},
      {{7}, {1}, {7}},
      {{3, 5}, {3, 1}, {1, 5}},
      {{2, 3, 4}, {2, 3, 4}, {1, 1, 1}},
      {{2, 4, 3, 5}, {2, 1, 3, 5}, {1, 4, 1, 5}},
  };
  const std::vector<std::vector<Layout>> layouts = {
      {Layout::kContiguous, Layout::kContiguous, Layout::kContiguous},
      {Layout::kPadded, Layout::kColumnMajor, Layout::kStepped},
      {Layout::kColumnMajor, Layout::kStepped, Layout::kPadded},
  };
  uint64_t seed = 100;
  for (const std::string op : {"add", "sub", "mul", "div", "max", "min", "pow"}) {
    for (ElemType dt : op == std::string("pow") ? kFloats : kAll) {
      for (const Shapes& s : shapes) {
        for (const auto& l : layouts) {
          TestTensor lhs(dt, s.lhs, l[0]), rhs(dt, s.rhs, l[1]), out(dt, s.out, l[2]);
          const bool positive = op == std::string("pow");
          lhs.FillRandom(seed++, positive ? 0.5 : -3, 3);
          rhs.FillRandom(seed++, positive ? -2 : -3, 3);
          ASSERT_TRUE(RunKernel(MakeCall(op, dt), {&lhs, &rhs, &out}).ok()) << op;
          ForEachIndex(s.out, [&](const std::vector<uint64_t>& idx) {
            std::vector<uint64_t> li = idx, ri = idx;
            for (size_t d = 0; d < idx.size(); ++d) {
              if (s.lhs[d] == 1) li[d] = 0;
              if (s.rhs[d] == 1) ri[d] = 0;
            }
            const double a = lhs.GetDouble(li), b = rhs.GetDouble(ri);
            double want = Ref(op, a, b, dt);
            want = RoundTo(want, dt);  // Integers wrap; halves round.
            ASSERT_TRUE(Close(out.GetDouble(idx), want, dt))
                << op << " " << DtypeName(dt) << " " << a << ", " << b << " got "
                << out.GetDouble(idx) << " want " << want;
          });
          ASSERT_TRUE(out.PaddingIntact());
        }
      }
    }
  }
}

template <typename T>
std::vector<T> RunPairs(const std::string& op, ElemType dt, const std::vector<T>& a,
                        const std::vector<T>& b) {
  const uint64_t n = a.size();
  TestTensor lhs(dt, {n}), rhs(dt, {n}), out(dt, {n});
  for (uint64_t i = 0; i < n; ++i) {
    lhs.Set<T>({i}, a[i]);
    rhs.Set<T>({i}, b[i]);
  }
  EXPECT_TRUE(RunKernel(MakeCall(op, dt), {&lhs, &rhs, &out}).ok());
  std::vector<T> r;
  for (uint64_t i = 0; i < n; ++i) r.push_back(out.Get<T>({i}));
  return r;
}

TEST(BinaryTest, IntegerDivisionByZeroIsZeroAndMinByMinusOneIsMin) {
  constexpr int32_t kMin = std::numeric_limits<int32_t>::min();
  EXPECT_EQ(RunPairs<int32_t>("div", ElemType::kI32, {5, kMin, -7, 0}, {0, -1, 2, 0}),
            (std::vector<int32_t>{0, kMin, -3, 0}));
  constexpr int64_t kMin64 = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(RunPairs<int64_t>("div", ElemType::kI64, {9, kMin64}, {0, -1}),
            (std::vector<int64_t>{0, kMin64}));
  EXPECT_EQ(RunPairs<uint32_t>("div", ElemType::kU32, {9, 9}, {0, 2}),
            (std::vector<uint32_t>{0, 4}));
}

TEST(BinaryTest, IntegerArithmeticWraps) {
  constexpr int32_t kMax = std::numeric_limits<int32_t>::max();
  constexpr int32_t kMin = std::numeric_limits<int32_t>::min();
  EXPECT_EQ(RunPairs<int32_t>("add", ElemType::kI32, {kMax}, {1}), (std::vector<int32_t>{kMin}));
  EXPECT_EQ(RunPairs<int32_t>("sub", ElemType::kI32, {kMin}, {1}), (std::vector<int32_t>{kMax}));
  EXPECT_EQ(RunPairs<int32_t>("mul", ElemType::kI32, {65536}, {65536}), (std::vector<int32_t>{0}));
  EXPECT_EQ(RunPairs<uint32_t>("sub", ElemType::kU32, {0}, {1}),
            (std::vector<uint32_t>{4294967295u}));
  EXPECT_EQ(RunPairs<int64_t>("mul", ElemType::kI64, {std::numeric_limits<int64_t>::max()}, {2}),
            (std::vector<int64_t>{-2}));
}

TEST(BinaryTest, FloatMaxAndMinPropagateNan) {
  const double nan = std::nan("");
  std::vector<double> r = RunPairs<double>("max", ElemType::kF64, {nan, 1, 2}, {1, nan, 3});
  EXPECT_TRUE(std::isnan(r[0]));
  EXPECT_TRUE(std::isnan(r[1]));
  EXPECT_EQ(r[2], 3);
  r = RunPairs<double>("min", ElemType::kF64, {nan, 1, 2}, {1, nan, 3});
  EXPECT_TRUE(std::isnan(r[0]));
  EXPECT_TRUE(std::isnan(r[1]));
  EXPECT_EQ(r[2], 2);
  r = RunPairs<double>("div", ElemType::kF64, {1, -1, 0}, {0, 0, 0});
  EXPECT_EQ(r[0], std::numeric_limits<double>::infinity());
  EXPECT_EQ(r[1], -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(r[2]));
}

TEST(BinaryTest, BroadcastRowVectorOverLargeMatrix) {
  TestTensor lhs(ElemType::kF32, {257, 300}, Layout::kPadded), rhs(ElemType::kF32, {1, 300}),
      out(ElemType::kF32, {257, 300});
  lhs.FillRandom(1);
  rhs.FillRandom(2);
  ASSERT_TRUE(RunKernel(MakeCall("add", ElemType::kF32), {&lhs, &rhs, &out}).ok());
  ForEachIndex(out.shape(), [&](const auto& idx) {
    ASSERT_EQ(out.Get<float>(idx), lhs.Get<float>(idx) + rhs.Get<float>({0, idx[1]}));
  });
}

TEST(BinaryTest, RunsInPlaceOnLhs) {
  TestTensor a(ElemType::kI32, {4, 6}, Layout::kStepped), b(ElemType::kI32, {4, 6});
  a.FillRandom(5);
  b.FillRandom(6);
  std::vector<int32_t> want;
  ForEachIndex(a.shape(),
               [&](const auto& i) { want.push_back(a.Get<int32_t>(i) * b.Get<int32_t>(i)); });
  BuiltinCall call = MakeCall("mul", ElemType::kI32);
  call.metadata = *EncodeKernelMetadata({a.buffer_len(), b.buffer_len(), a.buffer_len()},
                                        {a.layout(), b.layout(), a.layout()});
  ASSERT_TRUE(RunBuiltinCpu(call, {a.buffer(), b.buffer(), a.buffer()}).ok());
  size_t k = 0;
  ForEachIndex(a.shape(), [&](const auto& i) { EXPECT_EQ(a.Get<int32_t>(i), want[k++]); });
}

}  // namespace
}  // namespace cubed::kernels::testing
