// The comparisons (eq ne lt le gt ge: bool out, broadcasting) through the daemon against host
// references, on every element type, with IEEE 754's NaN and signed-zero rules and integer limits.

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

}  // namespace
}  // namespace cubed::integration
