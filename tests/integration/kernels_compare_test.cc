// The comparisons (eq ne lt le gt ge: bool out, broadcasting) and where (cond ? x : y, all
// three broadcasting) through the daemon against host references: every element type, IEEE 754's
// NaN and signed-zero rules, integer limits, NaN payloads kept by where.

#include <cmath>
#include <cstring>

#include "common/half.h"
#include "tests/integration/kernel_test_util.h"

namespace cubed::integration {
namespace {

using CompareKernelTest = DaemonTest;

const char* const kComparisons[] = {"eq", "ne", "lt", "le", "gt", "ge"};

template <typename T>
bool Compare(const std::string& op, T a, T b) {
  if (op == "eq") return a == b;
  if (op == "ne") return a != b;
  if (op == "lt") return a < b;
  if (op == "le") return a <= b;
  if (op == "gt") return a > b;
  return a >= b;
}

struct Shapes {
  std::vector<uint64_t> lhs, rhs, out;
};

const std::vector<Shapes> kShapes = {
    {{7}, {7}, {7}},          {{5}, {1}, {5}},
    {{3, 1}, {1, 4}, {3, 4}}, {{2, 3, 4}, {1, 3, 1}, {2, 3, 4}},
    {{301}, {301}, {301}},
};

TEST_F(CompareKernelTest, NativeTypesBroadcastToBool) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::mt19937_64 rng(60);
  for (ElemType t : kNativeElemTypes) {
    WithType(t, [&](auto zero) {
      using T = decltype(zero);
      for (const char* op : kComparisons) {
        for (const Shapes& s : kShapes) {
          SCOPED_TRACE(absl::StrCat(op, " ", ElemTypeName(t), " ", ShapeString(s.lhs), " ",
                                    ShapeString(s.rhs)));
          // Values 0 .. 3: equal pairs are common.
          auto a = RandomTensor<T>(rng, s.lhs, 0, 3);
          auto b = RandomTensor<T>(rng, s.rhs, 0, 3);
          if constexpr (std::is_floating_point_v<T>) {
            for (T& v : a.data) v = std::round(v);
            for (T& v : b.data) v = std::round(v);
          }
          Tensor x = Upload(*client, a), y = Upload(*client, b);
          Tensor z = Output(*client, s.out, 1);
          ASSERT_TRUE(client->Execute(Builtin(op, t), {x, y}, {z}).ok());
          std::vector<uint8_t> want(NumElements(s.out));
          for (uint64_t i = 0; i < want.size(); ++i) {
            const auto idx = Unflatten(i, s.out);
            want[i] = Compare<T>(op, a.data[BroadcastOffset(idx, s.lhs)],
                                 b.data[BroadcastOffset(idx, s.rhs)]);
          }
          EXPECT_EQ(Download<uint8_t>(*client, z), want);
        }
      }
    });
  }
}

// Every pair of `values`, [n, 1] against [1, n], for every op, against `Compare` on T.
template <typename T>
void CheckAllPairs(Client& client, const std::vector<T>& values) {
  const uint64_t n = values.size();
  Tensor x = Upload(client, HostTensor<T>{{n, 1}, values});
  Tensor y = Upload(client, HostTensor<T>{{1, n}, values});
  Tensor z = Output(client, {n, n}, 1);
  for (const char* op : kComparisons) {
    SCOPED_TRACE(op);
    ASSERT_TRUE(client.Execute(Builtin(op, ElemTypeOf<T>()), {x, y}, {z}).ok());
    const std::vector<uint8_t> got = Download<uint8_t>(client, z);
    for (uint64_t i = 0; i < n; ++i) {
      for (uint64_t j = 0; j < n; ++j) {
        EXPECT_EQ(got[i * n + j], Compare<T>(op, values[i], values[j]) ? 1 : 0)
            << +values[i] << " " << op << " " << +values[j];
      }
    }
  }
}

TEST_F(CompareKernelTest, FloatsFollowIeee) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  const float fi = std::numeric_limits<float>::infinity();
  CheckAllPairs<float>(*client, {std::nanf(""), fi, -fi, 0.0f, -0.0f,
                                 std::numeric_limits<float>::denorm_min(), 1.0f, -1.0f});
  const double di = std::numeric_limits<double>::infinity();
  CheckAllPairs<double>(*client, {std::nan(""), di, -di, 0.0, -0.0,
                                  std::numeric_limits<double>::denorm_min(), 1.0, -1.0});
}

TEST_F(CompareKernelTest, IntegerLimitsCompareExactly) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  // Neighbours that a comparison through double would merge.
  const int64_t max64 = std::numeric_limits<int64_t>::max();
  const int64_t min64 = std::numeric_limits<int64_t>::min();
  CheckAllPairs<int64_t>(*client, {min64, min64 + 1, -1, 0, 1, max64 - 1, max64});
  CheckAllPairs<uint32_t>(*client, {0u, 1u, 0x7fffffffu, 0x80000000u, 0xfffffffeu, 0xffffffffu});
  CheckAllPairs<int32_t>(*client, {std::numeric_limits<int32_t>::min(), -1, 0, 1,
                                   std::numeric_limits<int32_t>::max()});
}

// The 2-byte and 1-byte types, by their stored bits: halves compare by value (NaN unordered,
// -0 == +0), i8..u16 as integers, bool as truth values (any non-zero byte is true).
TEST_F(CompareKernelTest, SmallTypesCompareByValue) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  struct Case {
    ElemType type;
    std::vector<uint16_t> lhs, rhs;  // Stored values (the low bytes for 1-byte types).
    std::vector<uint8_t> lt, eq;
  };
  const uint16_t h_nan = 0x7e00, h_inf = 0x7c00, h_one = Half(1.0f).bits, h_two = Half(2.0f).bits;
  const uint16_t b_nan = 0x7fc0, b_one = BFloat16(1.0f).bits, b_big = BFloat16(3e38f).bits;
  const std::vector<Case> cases = {
      {ElemType::kF16,
       {h_nan, 0x8000, h_one, h_two, h_inf},
       {h_nan, 0x0000, h_two, h_one, h_inf},
       {0, 0, 1, 0, 0},
       {0, 1, 0, 0, 1}},
      {ElemType::kBF16,
       {b_nan, b_one, b_big, 0x8000},
       {b_one, b_one, b_one, 0x0000},
       {0, 0, 0, 0},
       {0, 1, 0, 1}},
      {ElemType::kI8, {0x80, 0x7f, 0xff}, {0x7f, 0x80, 0x00}, {1, 0, 1}, {0, 0, 0}},
      {ElemType::kU8, {0x80, 0x7f, 0xff}, {0x7f, 0x80, 0xff}, {0, 1, 0}, {0, 0, 1}},
      {ElemType::kI16, {0x8000, 0x7fff, 0xffff}, {0x7fff, 0x8000, 0xffff}, {1, 0, 0}, {0, 0, 1}},
      {ElemType::kU16, {0x8000, 0x7fff, 0xffff}, {0x7fff, 0x8000, 0x0000}, {0, 1, 0}, {0, 0, 0}},
      {ElemType::kBool, {0, 7, 0, 1}, {0, 1, 200, 0}, {0, 0, 1, 0}, {1, 1, 0, 0}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(ElemTypeName(c.type));
    const uint32_t es = ElemSize(c.type);
    auto encode = [&](const std::vector<uint16_t>& v) {
      std::vector<uint8_t> bytes(v.size() * es);
      for (size_t i = 0; i < v.size(); ++i) std::memcpy(&bytes[i * es], &v[i], es);
      return bytes;
    };
    const uint64_t n = c.lhs.size();
    auto x = client->CreateTensor(encode(c.lhs), {n}, es);
    auto y = client->CreateTensor(encode(c.rhs), {n}, es);
    ASSERT_TRUE(x.ok() && y.ok());
    Tensor z = Output(*client, {n}, 1);
    ASSERT_TRUE(client->Execute(Builtin("lt", c.type), {*x, *y}, {z}).ok());
    EXPECT_EQ(Download<uint8_t>(*client, z), c.lt);
    ASSERT_TRUE(client->Execute(Builtin("eq", c.type), {*x, *y}, {z}).ok());
    EXPECT_EQ(Download<uint8_t>(*client, z), c.eq);
  }
}

TEST_F(CompareKernelTest, MismatchedShapesAreRefused) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  Tensor x = Output(*client, {3, 2}, 4), y = Output(*client, {3, 3}, 4);
  Tensor z = Output(*client, {3, 3}, 1);
  const absl::Status s =
      Settled(*client, client->Execute(Builtin("lt", ElemType::kF32), {x, y}, {z}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("kernel 'lt': lhs shape [3, 2] does not broadcast"), std::string::npos)
      << s;
}

struct WhereShapes {
  std::vector<uint64_t> cond, x, y, out;
};

TEST_F(CompareKernelTest, WhereBroadcastsAllThree) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  const std::vector<WhereShapes> shapes = {
      {{9}, {9}, {9}, {9}},
      {{9}, {9}, {1}, {9}},  // A mask over one value.
      {{3, 1}, {1, 4}, {3, 4}, {3, 4}},
      {{1, 3, 1}, {2, 1, 5}, {1, 1, 1}, {2, 3, 5}},
      {{257}, {257}, {257}, {257}},
  };
  std::mt19937_64 rng(61);
  for (ElemType t : kNativeElemTypes) {
    WithType(t, [&](auto zero) {
      using T = decltype(zero);
      for (const WhereShapes& s : shapes) {
        SCOPED_TRACE(absl::StrCat(ElemTypeName(t), " ", ShapeString(s.cond), " ", ShapeString(s.x),
                                  " ", ShapeString(s.y)));
        // Any non-zero byte is true.
        auto c = RandomTensor<uint8_t>(rng, s.cond, 0, 2);
        for (uint8_t& v : c.data) v = v == 2 ? 7 : v;
        auto a = RandomTensor<T>(rng, s.x, 0, 100);
        auto b = RandomTensor<T>(rng, s.y, 0, 100);
        Tensor tc = Upload(*client, c), tx = Upload(*client, a), ty = Upload(*client, b);
        Tensor out = Output(*client, s.out, sizeof(T));
        ASSERT_TRUE(client->Execute(Builtin("where", t), {tc, tx, ty}, {out}).ok());
        std::vector<T> want(NumElements(s.out));
        for (uint64_t i = 0; i < want.size(); ++i) {
          const auto idx = Unflatten(i, s.out);
          want[i] = c.data[BroadcastOffset(idx, s.cond)] != 0 ? a.data[BroadcastOffset(idx, s.x)]
                                                              : b.data[BroadcastOffset(idx, s.y)];
        }
        EXPECT_EQ(Download<T>(*client, out), want);
      }
    });
  }
}

TEST_F(CompareKernelTest, WhereOfAComparisonMasksAndKeepsBits) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  // out = where(x > 0, x, -inf): the masking of attention scores.
  HostTensor<float> in{{6}, {1.5f, -2.0f, 0.0f, -0.0f, 3.0f, 0.0f}};
  uint32_t nan_bits = 0x7fc00123u;
  std::memcpy(&in.data[5], &nan_bits, 4);
  Tensor x = Upload(*client, in);
  Tensor zero = Upload(*client, HostTensor<float>{{1}, {0.0f}});
  Tensor ninf = Upload(*client, HostTensor<float>{{1}, {-std::numeric_limits<float>::infinity()}});
  Tensor mask = Output(*client, {6}, 1), out = Output(*client, {6}, 4);
  ASSERT_TRUE(client->Execute(Builtin("ne", ElemType::kF32), {x, x}, {mask}).ok());
  EXPECT_EQ(Download<uint8_t>(*client, mask), (std::vector<uint8_t>{0, 0, 0, 0, 0, 1}));
  // where(isnan(x), x, x): the NaN comes through with its payload, -0 with its sign.
  ASSERT_TRUE(client->Execute(Builtin("where", ElemType::kF32), {mask, x, x}, {out}).ok());
  const std::vector<uint32_t> bits = Download<uint32_t>(*client, out);
  EXPECT_EQ(bits[3], 0x80000000u);
  EXPECT_EQ(bits[5], nan_bits);
  ASSERT_TRUE(client->Execute(Builtin("gt", ElemType::kF32), {x, zero}, {mask}).ok());
  ASSERT_TRUE(client->Execute(Builtin("where", ElemType::kF32), {mask, x, ninf}, {out}).ok());
  const float ni = -std::numeric_limits<float>::infinity();
  const std::vector<float> got = Download<float>(*client, out);
  EXPECT_EQ(got, (std::vector<float>{1.5f, ni, ni, ni, 3.0f, ni}));
}

TEST_F(CompareKernelTest, WhereChecksItsBuffers) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  Tensor c = Output(*client, {3, 2}, 1), x = Output(*client, {3, 4}, 4);
  Tensor out = Output(*client, {3, 4}, 4);
  absl::Status s =
      Settled(*client, client->Execute(Builtin("where", ElemType::kF32), {c, x, x}, {out}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("kernel 'where': cond shape [3, 2] does not broadcast"),
            std::string::npos)
      << s;
  // A fresh output: the failed launch poisoned `out` (its next use reports that failure).
  Tensor out2 = Output(*client, {3, 4}, 4);
  s = Settled(*client, client->Execute(Builtin("where", ElemType::kF32), {x, x}, {out2}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("kernel 'where' takes 4 buffers (cond, x, y, out), got 3"),
            std::string::npos)
      << s;
}

}  // namespace
}  // namespace cubed::integration
