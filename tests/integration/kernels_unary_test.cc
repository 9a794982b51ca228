// The unary elementwise kernels against host references.

#include <cmath>
#include <functional>

#include "tests/integration/kernel_test_util.h"

namespace cubed::integration {
namespace {

using UnaryKernelTest = DaemonTest;

const std::vector<std::vector<uint64_t>> kShapes = {{1}, {9}, {4, 6}, {3, 1, 5}, {257, 3}};

// Runs `name` on random inputs in [lo, hi] of every type in `types` and compares with `ref`.
template <typename Ref>
void CheckUnary(Client& client, const std::string& name, std::vector<ElemType> types, double lo,
                double hi, Ref ref, std::mt19937_64& rng) {
  for (ElemType t : types) {
    WithType(t, [&](auto zero) {
      using T = decltype(zero);
      for (const auto& shape : kShapes) {
        SCOPED_TRACE(absl::StrCat(name, " ", ElemTypeName(t), " ", ShapeString(shape)));
        auto in = RandomTensor<T>(rng, shape, lo, hi);
        Tensor x = Upload(client, in);
        Tensor y = Output(client, shape, sizeof(T));
        absl::Status s = client.Execute(Builtin(name, t), {x}, {y});
        ASSERT_TRUE(s.ok()) << s;
        std::vector<T> want;
        for (T v : in.data) want.push_back(ref(v));
        ExpectNear(Download<T>(client, y), want, 4 * RelTol<T>(), 1e-6);
      }
    });
  }
}

const std::vector<ElemType> kSignedTypes = {ElemType::kF32, ElemType::kF64, ElemType::kI32,
                                            ElemType::kI64};
const std::vector<ElemType> kFloatTypes = {ElemType::kF32, ElemType::kF64};

TEST_F(UnaryKernelTest, NegAbsRelu) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::mt19937_64 rng(20);
  CheckUnary(
      *client, "neg", kSignedTypes, -1000, 1000, [](auto x) { return decltype(x)(-x); }, rng);
  CheckUnary(
      *client, "abs", kSignedTypes, -1000, 1000, [](auto x) { return x < 0 ? decltype(x)(-x) : x; },
      rng);
  CheckUnary(
      *client, "relu", kSignedTypes, -1000, 1000, [](auto x) { return x < 0 ? decltype(x)(0) : x; },
      rng);
}

TEST_F(UnaryKernelTest, IntegerNegAndAbsWrapAtTheMinimum) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  HostTensor<int32_t> in{{3}, {std::numeric_limits<int32_t>::min(), -5, 5}};
  Tensor x = Upload(*client, in);
  Tensor y = Output(*client, {3}, 4);
  ASSERT_TRUE(client->Execute(Builtin("abs", ElemType::kI32), {x}, {y}).ok());
  EXPECT_EQ(Download<int32_t>(*client, y),
            (std::vector<int32_t>{std::numeric_limits<int32_t>::min(), 5, 5}));
  ASSERT_TRUE(client->Execute(Builtin("neg", ElemType::kI32), {x}, {y}).ok());
  EXPECT_EQ(Download<int32_t>(*client, y),
            (std::vector<int32_t>{std::numeric_limits<int32_t>::min(), 5, -5}));
}

TEST_F(UnaryKernelTest, Transcendentals) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::mt19937_64 rng(21);
  CheckUnary(
      *client, "exp", kFloatTypes, -20, 20, [](auto x) { return std::exp(x); }, rng);
  CheckUnary(
      *client, "log", kFloatTypes, 1e-3, 1e4, [](auto x) { return std::log(x); }, rng);
  CheckUnary(
      *client, "sqrt", kFloatTypes, 0, 1e4, [](auto x) { return std::sqrt(x); }, rng);
  CheckUnary(
      *client, "tanh", kFloatTypes, -10, 10, [](auto x) { return std::tanh(x); }, rng);
  CheckUnary(
      *client, "sigmoid", kFloatTypes, -50, 50,
      [](auto x) { return decltype(x)(1) / (decltype(x)(1) + std::exp(-x)); }, rng);
}

// PyTorch's gelu (erf and tanh forms) and silu, in double.
TEST_F(UnaryKernelTest, Activations) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::mt19937_64 rng(23);
  CheckUnary(
      *client, "gelu", kFloatTypes, -8, 8,
      [](auto x) {
        const double v = x;
        return decltype(x)(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
      },
      rng);
  CheckUnary(
      *client, "gelu_tanh", kFloatTypes, -8, 8,
      [](auto x) {
        const double v = x;
        return decltype(x)(0.5 * v *
                           (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))));
      },
      rng);
  CheckUnary(
      *client, "silu", kFloatTypes, -30, 30,
      [](auto x) {
        const double v = x;
        return decltype(x)(v / (1 + std::exp(-v)));
      },
      rng);
}

TEST_F(UnaryKernelTest, ActivationsOfInfinitiesAndNan) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  const float inf = std::numeric_limits<float>::infinity();
  HostTensor<float> in{{4}, {-inf, inf, std::nanf(""), -0.0f}};
  Tensor x = Upload(*client, in);
  Tensor y = Output(*client, {4}, 4);
  for (const char* name : {"gelu", "gelu_tanh", "silu"}) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(client->Execute(Builtin(name, ElemType::kF32), {x}, {y}).ok());
    const std::vector<float> got = Download<float>(*client, y);
    EXPECT_EQ(got[0], 0.0f);
    EXPECT_TRUE(std::signbit(got[0])) << "-inf gives -0";
    EXPECT_EQ(got[1], inf);
    EXPECT_TRUE(std::isnan(got[2]));
    EXPECT_TRUE(got[3] == 0.0f && std::signbit(got[3])) << "-0 gives -0";
  }
}

TEST_F(UnaryKernelTest, InPlaceOnTheSameTensor) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::mt19937_64 rng(22);
  auto in = RandomTensor<double>(rng, {50, 3}, -5, 5);
  Tensor x = Upload(*client, in);
  ASSERT_TRUE(client->Execute(Builtin("relu", ElemType::kF64), {x}, {x}).ok());
  std::vector<double> want;
  for (double v : in.data) want.push_back(v < 0 ? 0 : v);
  ExpectNear(Download<double>(*client, x), want, 0, 0);
}

TEST_F(UnaryKernelTest, UnsupportedTypesAreRefused) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  Tensor u = Output(*client, {4}, 4);
  for (const char* name : {"neg", "abs", "relu", "exp", "log", "gelu", "gelu_tanh", "silu"}) {
    absl::Status s = Settled(*client, client->Execute(Builtin(name, ElemType::kU32), {u}, {u}));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << name << " u32: " << s;
  }
  Tensor i = Output(*client, {4}, 8);
  absl::Status s = Settled(*client, client->Execute(Builtin("sqrt", ElemType::kI64), {i}, {i}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "sqrt i64: " << s;
}

}  // namespace
}  // namespace cubed::integration
