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
  call.metadata = kernels::ToMetadataWords(*EncodeKernelMetadata(
      {a.buffer_len(), b.buffer_len(), a.buffer_len()}, {a.layout(), b.layout(), a.layout()}));
  ASSERT_TRUE(RunBuiltinCpu(call, {a.buffer(), b.buffer(), a.buffer()}).ok());
  size_t k = 0;
  ForEachIndex(a.shape(), [&](const auto& i) { EXPECT_EQ(a.Get<int32_t>(i), want[k++]); });
}

bool CompareRef(const std::string& op, double a, double b) {
  if (op == "eq") return a == b;
  if (op == "ne") return a != b;
  if (op == "lt") return a < b;
  if (op == "le") return a <= b;
  if (op == "gt") return a > b;
  return a >= b;
}

const std::vector<std::string> kComparisons = {"eq", "ne", "lt", "le", "gt", "ge"};

TEST(CompareTest, EveryOpDtypeBroadcastAndLayoutMatchesReference) {
  const std::vector<Shapes> shapes = {
      {{}, {}, {}},
      {{1023}, {1023}, {1023}},
      {{7}, {1}, {7}},
      {{3, 5}, {3, 1}, {1, 5}},
      {{2, 4, 3, 5}, {2, 1, 3, 5}, {1, 4, 1, 5}},
  };
  const std::vector<std::vector<Layout>> layouts = {
      {Layout::kContiguous, Layout::kContiguous, Layout::kContiguous},
      {Layout::kPadded, Layout::kColumnMajor, Layout::kStepped},
      {Layout::kColumnMajor, Layout::kStepped, Layout::kPadded},
  };
  uint64_t seed = 500;
  for (const std::string& op : kComparisons) {
    for (ElemType dt : kEveryType) {
      for (const Shapes& s : shapes) {
        for (const auto& l : layouts) {
          TestTensor lhs(dt, s.lhs, l[0]), rhs(dt, s.rhs, l[1]), out(ElemType::kBool, s.out, l[2]);
          // Few distinct values (-2 .. 2), so that equal pairs are common.
          lhs.FillRandom(seed++, -2, 2);
          rhs.FillRandom(seed++, -2, 2);
          for (TestTensor* t : {&lhs, &rhs}) {
            ForEachIndex(t->shape(), [&](const auto& i) {
              t->SetDouble(i, std::fmod(std::round(t->GetDouble(i)), 3));
            });
          }
          ASSERT_TRUE(RunKernel(MakeCall(op, dt), {&lhs, &rhs, &out}).ok()) << op;
          ForEachIndex(s.out, [&](const std::vector<uint64_t>& idx) {
            std::vector<uint64_t> li = idx, ri = idx;
            for (size_t d = 0; d < idx.size(); ++d) {
              if (s.lhs[d] == 1) li[d] = 0;
              if (s.rhs[d] == 1) ri[d] = 0;
            }
            const double a = lhs.GetDouble(li), b = rhs.GetDouble(ri);
            ASSERT_EQ(out.Get<uint8_t>(idx), CompareRef(op, a, b) ? 1 : 0)
                << op << " " << DtypeName(dt) << " " << a << ", " << b;
          });
          ASSERT_TRUE(out.PaddingIntact());
        }
      }
    }
  }
}

// Compares every pair of `values` (stored as `dt`) with every op; the results must be the IEEE
// 754 ones the double reference gives (NaN unordered and unequal to itself, -0 == +0).
void CheckAllPairs(ElemType dt, const std::vector<double>& values) {
  const uint64_t n = values.size();
  TestTensor lhs(dt, {n, 1}), rhs(dt, {1, n}), out(ElemType::kBool, {n, n});
  for (uint64_t i = 0; i < n; ++i) {
    lhs.SetDouble({i, 0}, values[i]);
    rhs.SetDouble({0, i}, values[i]);
  }
  for (const std::string& op : kComparisons) {
    ASSERT_TRUE(RunKernel(MakeCall(op, dt), {&lhs, &rhs, &out}).ok());
    for (uint64_t i = 0; i < n; ++i) {
      for (uint64_t j = 0; j < n; ++j) {
        const double a = RoundTo(values[i], dt), b = RoundTo(values[j], dt);
        EXPECT_EQ(out.Get<uint8_t>({i, j}), CompareRef(op, a, b) ? 1 : 0)
            << op << " " << DtypeName(dt) << " " << a << ", " << b;
      }
    }
  }
}

TEST(CompareTest, FloatEdgeValuesFollowIeee) {
  const double inf = std::numeric_limits<double>::infinity();
  for (ElemType dt : kFloats) {
    const double tiny = dt == ElemType::kF32   ? std::numeric_limits<float>::denorm_min()
                        : dt == ElemType::kF64 ? std::numeric_limits<double>::denorm_min()
                        : dt == ElemType::kF16 ? std::ldexp(1.0, -24)
                                               : std::ldexp(1.0, -133);
    CheckAllPairs(dt, {std::nan(""), -std::nan(""), inf, -inf, 0.0, -0.0, tiny, -tiny, 2 * tiny,
                       1.0, -1.0, 1.5, 65504.0});
  }
}

TEST(CompareTest, IntegerLimitsCompareExactly) {
  // i64 and u32/u64-sized neighbours that a comparison through double would merge.
  const int64_t max64 = std::numeric_limits<int64_t>::max();
  const int64_t min64 = std::numeric_limits<int64_t>::min();
  TestTensor a(ElemType::kI64, {4}), b(ElemType::kI64, {4}), out(ElemType::kBool, {4});
  const int64_t av[4] = {max64, min64, max64 - 1, -1};
  const int64_t bv[4] = {max64 - 1, min64 + 1, max64 - 1, 0};
  for (uint64_t i = 0; i < 4; ++i) {
    a.Set<int64_t>({i}, av[i]);
    b.Set<int64_t>({i}, bv[i]);
  }
  ASSERT_TRUE(RunKernel(MakeCall("gt", ElemType::kI64), {&a, &b, &out}).ok());
  EXPECT_EQ(out.Get<uint8_t>({0}), 1);
  EXPECT_EQ(out.Get<uint8_t>({1}), 0);
  EXPECT_EQ(out.Get<uint8_t>({2}), 0);
  EXPECT_EQ(out.Get<uint8_t>({3}), 0);
  ASSERT_TRUE(RunKernel(MakeCall("eq", ElemType::kI64), {&a, &b, &out}).ok());
  EXPECT_EQ(out.Get<uint8_t>({0}), 0);
  EXPECT_EQ(out.Get<uint8_t>({2}), 1);
  for (ElemType dt : {ElemType::kI8, ElemType::kU8, ElemType::kI16, ElemType::kU16, ElemType::kI32,
                      ElemType::kU32}) {
    const int bits = 8 * static_cast<int>(ElemSize(dt));
    const double lo = IsSigned(dt) ? -std::ldexp(1.0, bits - 1) : 0;
    const double hi = std::ldexp(1.0, IsSigned(dt) ? bits - 1 : bits) - 1;
    CheckAllPairs(dt, {lo, lo + 1, IsSigned(dt) ? -1.0 : 2.0, 0, 1, hi - 1, hi});
  }
  // Unsigned values compare as unsigned: 0xffffffff is the largest u32, not -1.
  TestTensor u(ElemType::kU32, {1}), v(ElemType::kU32, {1}), r(ElemType::kBool, {1});
  u.Set<uint32_t>({0}, 0xffffffffu);
  v.Set<uint32_t>({0}, 1);
  ASSERT_TRUE(RunKernel(MakeCall("gt", ElemType::kU32), {&u, &v, &r}).ok());
  EXPECT_EQ(r.Get<uint8_t>({0}), 1);
}

TEST(CompareTest, BoolComparesTruthValues) {
  TestTensor a(ElemType::kBool, {4}), b(ElemType::kBool, {4}), out(ElemType::kBool, {4});
  const uint8_t av[4] = {0, 7, 0, 1}, bv[4] = {0, 1, 200, 0};
  for (uint64_t i = 0; i < 4; ++i) {
    a.Set<uint8_t>({i}, av[i]);
    b.Set<uint8_t>({i}, bv[i]);
  }
  ASSERT_TRUE(RunKernel(MakeCall("eq", ElemType::kBool), {&a, &b, &out}).ok());
  EXPECT_EQ(out.Get<uint8_t>({1}), 1) << "the bytes 7 and 1 are both true";
  EXPECT_EQ(out.Get<uint8_t>({2}), 0);
  ASSERT_TRUE(RunKernel(MakeCall("lt", ElemType::kBool), {&a, &b, &out}).ok());
  EXPECT_EQ(out.Get<uint8_t>({0}), 0);
  EXPECT_EQ(out.Get<uint8_t>({1}), 0);
  EXPECT_EQ(out.Get<uint8_t>({2}), 1) << "false < true";
  EXPECT_EQ(out.Get<uint8_t>({3}), 0);
}

TEST(CompareTest, OutputMustBeBoolSized) {
  // The output holds bool elements: 5 of them need 5 bytes, whatever the inputs' type.
  TestTensor lhs(ElemType::kF32, {5}), rhs(ElemType::kF32, {5});
  BuiltinCall call = MakeCall("lt", ElemType::kF32);
  const TensorLayout l = TensorLayout::Contiguous({5});
  call.metadata = kernels::ToMetadataWords(*EncodeKernelMetadata(
      {lhs.buffer_len(), rhs.buffer_len(), 5}, {lhs.layout(), rhs.layout(), l}));
  std::vector<uint8_t> out(4, 0x5a);
  const absl::Status s = RunBuiltinCpu(call, {lhs.buffer(), rhs.buffer(), {out.data(), 4}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("spans 5 bool elements = 5 bytes"), std::string::npos) << s;
}

TEST(CompareTest, RunsInPlaceOnlyForOneByteTypes) {
  TestTensor a(ElemType::kU8, {6}), b(ElemType::kU8, {6});
  a.FillRandom(1);
  b.FillRandom(2);
  std::vector<uint8_t> want;
  for (uint64_t i = 0; i < 6; ++i) want.push_back(a.Get<uint8_t>({i}) < b.Get<uint8_t>({i}));
  BuiltinCall call = MakeCall("lt", ElemType::kU8);
  call.metadata = kernels::ToMetadataWords(*EncodeKernelMetadata(
      {a.buffer_len(), b.buffer_len(), a.buffer_len()}, {a.layout(), b.layout(), a.layout()}));
  ASSERT_TRUE(RunBuiltinCpu(call, {a.buffer(), b.buffer(), a.buffer()}).ok());
  for (uint64_t i = 0; i < 6; ++i) EXPECT_EQ(a.Get<uint8_t>({i}), want[i]);
  // f32 in, bool out: the output cannot be the input's memory with its layout.
  TestTensor f(ElemType::kF32, {6}), g(ElemType::kF32, {6});
  call = MakeCall("lt", ElemType::kF32);
  call.metadata = kernels::ToMetadataWords(*EncodeKernelMetadata(
      {f.buffer_len(), g.buffer_len(), f.buffer_len()}, {f.layout(), g.layout(), f.layout()}));
  const absl::Status s = RunBuiltinCpu(call, {f.buffer(), g.buffer(), f.buffer()});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("overlaps buffer 0 (lhs)"), std::string::npos) << s;
}

}  // namespace
}  // namespace cubed::kernels::testing
