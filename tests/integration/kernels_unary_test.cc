// The unary elementwise kernels against host references.

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
  for (const char* name : {"neg", "abs", "relu", "exp", "log"}) {
    absl::Status s = Settled(*client, client->Execute(Builtin(name, ElemType::kU32), {u}, {u}));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << name << " u32: " << s;
  }
  Tensor i = Output(*client, {4}, 8);
  absl::Status s = Settled(*client, client->Execute(Builtin("sqrt", ElemType::kI64), {i}, {i}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "sqrt i64: " << s;
}

}  // namespace
}  // namespace cubed::integration
