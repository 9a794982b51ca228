// The binary elementwise kernels, with broadcasting, against host references.

#include <cmath>

#include "tests/integration/kernel_test_util.h"

namespace cubed::integration {
namespace {

using BinaryKernelTest = DaemonTest;

struct BroadcastCase {
  std::vector<uint64_t> lhs, rhs, out;
};

const std::vector<BroadcastCase> kCases = {
    {{1}, {1}, {1}},
    {{7}, {7}, {7}},
    {{5}, {1}, {5}},
    {{1}, {5}, {5}},
    {{3, 1}, {1, 4}, {3, 4}},
    {{17, 33}, {17, 33}, {17, 33}},
    {{2, 3, 4}, {1, 3, 1}, {2, 3, 4}},
    {{1, 1, 9}, {4, 5, 1}, {4, 5, 9}},
    {{2, 1, 3, 1, 2}, {1, 2, 1, 3, 1}, {2, 2, 3, 3, 2}},
    {{301}, {301}, {301}},
};

// Runs `name` on every case for type T with inputs from [lo, hi] and compares with `ref`.
template <typename T, typename Ref>
void CheckBinary(Client& client, const std::string& name, double lo, double hi, Ref ref,
                 std::mt19937_64& rng, double rel_tol = RelTol<T>()) {
  const ElemType t = ElemTypeOf<T>();
  for (const BroadcastCase& c : kCases) {
    SCOPED_TRACE(absl::StrCat(name, " ", ElemTypeName(t), " ", ShapeString(c.lhs), " ",
                              ShapeString(c.rhs), " -> ", ShapeString(c.out)));
    auto a = RandomTensor<T>(rng, c.lhs, lo, hi);
    auto b = RandomTensor<T>(rng, c.rhs, lo, hi);
    Tensor x = Upload(client, a);
    Tensor y = Upload(client, b);
    Tensor z = Output(client, c.out, sizeof(T));
    absl::Status s = client.Execute(Builtin(name, t), {x, y}, {z});
    ASSERT_TRUE(s.ok()) << s;
    std::vector<T> want(NumElements(c.out));
    for (uint64_t i = 0; i < want.size(); ++i) {
      auto idx = Unflatten(i, c.out);
      want[i] = ref(a.data[BroadcastOffset(idx, c.lhs)], b.data[BroadcastOffset(idx, c.rhs)]);
    }
    ExpectNear(Download<T>(client, z), want, rel_tol, 1e-6);
  }
}

template <typename T>
void CheckArithmetic(Client& client, std::mt19937_64& rng) {
  // Integer ranges include 0 (x / 0 == 0) and, for signed types, negatives.
  const double lo = std::is_signed_v<T> ? -50 : 0;
  const double hi = 50;
  CheckBinary<T>(
      client, "add", lo, hi, [](T a, T b) { return WrapOp(a, b, '+'); }, rng);
  CheckBinary<T>(
      client, "sub", lo, hi, [](T a, T b) { return WrapOp(a, b, '-'); }, rng);
  CheckBinary<T>(
      client, "mul", lo, hi, [](T a, T b) { return WrapOp(a, b, '*'); }, rng);
  CheckBinary<T>(
      client, "div", lo, hi, [](T a, T b) { return WrapOp(a, b, '/'); }, rng);
  CheckBinary<T>(
      client, "max", lo, hi, [](T a, T b) { return a < b ? b : a; }, rng);
  CheckBinary<T>(
      client, "min", lo, hi, [](T a, T b) { return b < a ? b : a; }, rng);
}

TEST_F(BinaryKernelTest, ArithmeticF32) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::mt19937_64 rng(30);
  CheckArithmetic<float>(*client, rng);
}

TEST_F(BinaryKernelTest, ArithmeticF64) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::mt19937_64 rng(31);
  CheckArithmetic<double>(*client, rng);
}

TEST_F(BinaryKernelTest, ArithmeticI32) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::mt19937_64 rng(32);
  CheckArithmetic<int32_t>(*client, rng);
}

TEST_F(BinaryKernelTest, ArithmeticU32) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::mt19937_64 rng(33);
  CheckArithmetic<uint32_t>(*client, rng);
}

TEST_F(BinaryKernelTest, ArithmeticI64) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::mt19937_64 rng(34);
  CheckArithmetic<int64_t>(*client, rng);
}

TEST_F(BinaryKernelTest, Pow) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::mt19937_64 rng(35);
  CheckBinary<float>(
      *client, "pow", 0.1, 4, [](float a, float b) { return std::pow(a, b); }, rng, 1e-5);
  CheckBinary<double>(
      *client, "pow", 0.1, 4, [](double a, double b) { return std::pow(a, b); }, rng);
}

TEST_F(BinaryKernelTest, IntegerEdgeCasesFollowTheAbi) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  constexpr int32_t kMin = std::numeric_limits<int32_t>::min();
  constexpr int32_t kMax = std::numeric_limits<int32_t>::max();
  HostTensor<int32_t> a{{4}, {kMin, 7, kMax, -9}};
  HostTensor<int32_t> b{{4}, {-1, 0, 1, 2}};
  Tensor x = Upload(*client, a);
  Tensor y = Upload(*client, b);
  Tensor z = Output(*client, {4}, 4);
  ASSERT_TRUE(client->Execute(Builtin("div", ElemType::kI32), {x, y}, {z}).ok());
  EXPECT_EQ(Download<int32_t>(*client, z), (std::vector<int32_t>{kMin, 0, kMax, -4}));
  ASSERT_TRUE(client->Execute(Builtin("add", ElemType::kI32), {x, y}, {z}).ok());
  EXPECT_EQ(Download<int32_t>(*client, z), (std::vector<int32_t>{kMax, 7, kMin, -7}));
}

TEST_F(BinaryKernelTest, FloatMaxMinPropagateNan) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  HostTensor<float> a{{3}, {nan, 1.f, 2.f}};
  HostTensor<float> b{{3}, {1.f, nan, 3.f}};
  Tensor x = Upload(*client, a);
  Tensor y = Upload(*client, b);
  Tensor z = Output(*client, {3}, 4);
  for (const char* name : {"max", "min"}) {
    ASSERT_TRUE(client->Execute(Builtin(name, ElemType::kF32), {x, y}, {z}).ok());
    auto got = Download<float>(*client, z);
    ASSERT_EQ(got.size(), 3u);
    EXPECT_TRUE(std::isnan(got[0])) << name;
    EXPECT_TRUE(std::isnan(got[1])) << name;
    EXPECT_EQ(got[2], std::string(name) == "max" ? 3.f : 2.f);
  }
}

TEST_F(BinaryKernelTest, ShapesThatDoNotBroadcastAreInvalidArgument) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  Tensor a = Output(*client, {3, 4}, 4);
  Tensor b = Output(*client, {2, 4}, 4);
  Tensor out = Output(*client, {3, 4}, 4);
  absl::Status s = Settled(*client, client->Execute(Builtin("add", ElemType::kF32), {a, b}, {out}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  Tensor rank1 = Output(*client, {4}, 4);
  s = Settled(*client, client->Execute(Builtin("add", ElemType::kF32), {a, rank1}, {out}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "ranks differ: " << s;
  Tensor ints = Output(*client, {3, 4}, 4);
  s = Settled(*client, client->Execute(Builtin("pow", ElemType::kI32), {ints, ints}, {ints}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "pow i32: " << s;
}

}  // namespace
}  // namespace cubed::integration
