// fill, copy and cast against host references, for every element type.

#include "tests/integration/kernel_test_util.h"

namespace cubed::integration {
namespace {

using DataKernelTest = DaemonTest;

const std::vector<std::vector<uint64_t>> kShapes = {{1},      {7},       {3, 5},       {2, 3, 4},
                                                    {33, 17}, {1, 1, 1}, {2, 1, 5, 3}, {1000}};

TEST_F(DataKernelTest, FillWritesTheScalarEverywhere) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  for (ElemType t : kNativeElemTypes) {
    WithType(t, [&](auto zero) {
      using T = decltype(zero);
      for (const auto& shape : kShapes) {
        SCOPED_TRACE(absl::StrCat(ElemTypeName(t), " ", ShapeString(shape)));
        const double value = std::is_signed_v<T> ? -42.5 : 42.0;
        Tensor out = Output(*client, shape, sizeof(T));
        ASSERT_TRUE(client->Execute(Builtin("fill", t), {}, {out}, {ScalarOf(t, value)}).ok());
        const T want = std::is_floating_point_v<T> ? static_cast<T>(value)
                                                   : static_cast<T>(static_cast<int64_t>(value));
        ExpectNear(Download<T>(*client, out), std::vector<T>(NumElements(shape), want));
      }
    });
  }
}

TEST_F(DataKernelTest, FillWithoutItsScalarIsInvalidArgument) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  Tensor out = Output(*client, {4}, 4);
  absl::Status s = Settled(*client, client->Execute(Builtin("fill", ElemType::kF32), {}, {out}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

TEST_F(DataKernelTest, CopyReproducesTheInput) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::mt19937_64 rng(10);
  for (ElemType t : kNativeElemTypes) {
    WithType(t, [&](auto zero) {
      using T = decltype(zero);
      for (const auto& shape : kShapes) {
        SCOPED_TRACE(absl::StrCat(ElemTypeName(t), " ", ShapeString(shape)));
        auto in = RandomTensor<T>(rng, shape, 0, 1e6);
        Tensor x = Upload(*client, in);
        Tensor y = Output(*client, shape, sizeof(T));
        ASSERT_TRUE(client->Execute(Builtin("copy", t), {x}, {y}).ok());
        ExpectNear(Download<T>(*client, y), in.data, 0, 0);
      }
    });
  }
}

TEST_F(DataKernelTest, CopyOfAStridedViewTransposes) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::mt19937_64 rng(11);
  auto in = RandomTensor<float>(rng, {5, 7}, -1, 1);
  Tensor x = Upload(*client, in);
  ASSERT_EQ(x.strides.size(), 2u);
  // The same memory seen as its 7x5 transpose.
  Tensor xt{x.handle, {7, 5}, {x.strides[1], x.strides[0]}, 4};
  Tensor y = Output(*client, {7, 5}, 4);
  ASSERT_TRUE(client->Execute(Builtin("copy", ElemType::kF32), {xt}, {y}).ok());
  std::vector<float> want(35);
  for (int i = 0; i < 7; ++i) {
    for (int j = 0; j < 5; ++j) want[i * 5 + j] = in.data[j * 7 + i];
  }
  ExpectNear(Download<float>(*client, y), want, 0, 0);
}

TEST_F(DataKernelTest, CastConvertsBetweenEveryPairOfTypes) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::mt19937_64 rng(12);
  for (ElemType from : kNativeElemTypes) {
    for (ElemType to : kNativeElemTypes) {
      WithType(from, [&](auto from_zero) {
        WithType(to, [&](auto to_zero) {
          using From = decltype(from_zero);
          using To = decltype(to_zero);
          SCOPED_TRACE(absl::StrCat(ElemTypeName(from), " -> ", ElemTypeName(to)));
          const double lo = std::is_signed_v<From> ? -1000 : 0;
          auto in = RandomTensor<From>(rng, {3, 67}, lo, 1000);
          if constexpr (std::is_floating_point_v<From>) {
            // Values the saturation rules decide: beyond every integer range, NaN, -0.5.
            in.data[0] = static_cast<From>(1e30);
            in.data[1] = static_cast<From>(-1e30);
            in.data[2] = std::numeric_limits<From>::quiet_NaN();
            in.data[3] = static_cast<From>(-0.5);
          } else if constexpr (std::is_signed_v<From>) {
            in.data[0] = std::numeric_limits<From>::min();  // Wraps into narrower types.
            in.data[1] = -1;
          } else {
            in.data[0] = std::numeric_limits<From>::max();
          }
          Tensor x = Upload(*client, in);
          Tensor y = Output(*client, in.shape, sizeof(To));
          BuiltinKernel cast{"cast", from, to, 0};
          ASSERT_TRUE(client->Execute(cast, {x}, {y}).ok());
          std::vector<To> want;
          for (From v : in.data) want.push_back(CastValue<To>(v));
          ExpectNear(Download<To>(*client, y), want, 1e-7, 0);
        });
      });
    }
  }
}

}  // namespace
}  // namespace cubed::integration
