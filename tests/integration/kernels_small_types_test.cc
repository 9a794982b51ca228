// f16, bf16, i8, u8, i16, u16 and bool through the daemon: fill, cast between every pair with
// edge values, arithmetic, reductions, softmax and matmul of the half types (f32 accumulation,
// one rounding), bool's or/and, and the errors for what no kernel has.

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/half.h"
#include "gmock/gmock.h"
#include "tests/integration/kernel_test_util.h"

namespace cubed::integration {
namespace {

using SmallTypesTest = DaemonTest;

constexpr ElemType kSmallTypes[] = {ElemType::kF16, ElemType::kBF16, ElemType::kI8,  ElemType::kU8,
                                    ElemType::kI16, ElemType::kU16,  ElemType::kBool};

// `v` stored as `t` the way cast stores it (docs/kernel-abi.md), as little-endian bytes.
std::vector<uint8_t> Encode(ElemType t, double v) {
  uint64_t bits = 0;
  switch (t) {
    case ElemType::kF16:
      bits = Half(v).bits;
      break;
    case ElemType::kBF16:
      bits = BFloat16(v).bits;
      break;
    case ElemType::kBool:
      bits = v != 0 ? 1 : 0;  // NaN is true.
      break;
    case ElemType::kF32: {
      const float f = static_cast<float>(v);
      std::memcpy(&bits, &f, 4);
      break;
    }
    case ElemType::kF64:
      std::memcpy(&bits, &v, 8);
      break;
    default: {  // Integers: truncate, NaN 0, saturate.
      const int b = 8 * static_cast<int>(ElemSize(t));
      if (b == 64 && !std::isnan(v) && std::fabs(v) >= std::ldexp(1.0, 63)) {
        bits = v > 0 ? (t == ElemType::kI64 ? uint64_t{INT64_MAX} : ~uint64_t{0})
                     : (t == ElemType::kI64 ? uint64_t{1} << 63 : 0);
        break;
      }
      const double lo = IsSigned(t) ? -std::ldexp(1.0, b - 1) : 0;
      const double hi = (IsSigned(t) ? std::ldexp(1.0, b - 1) : std::ldexp(1.0, b)) - 1;
      const double c = std::isnan(v) ? 0 : std::max(lo, std::min(hi, std::trunc(v)));
      bits = static_cast<uint64_t>(static_cast<int64_t>(c));
    }
  }
  std::vector<uint8_t> out(ElemSize(t));
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(bits >> (8 * i));
  return out;
}

Tensor UploadBytes(Client& client, const std::vector<uint8_t>& bytes, std::vector<uint64_t> shape,
                   ElemType t) {
  auto r = client.CreateTensor(bytes, shape, ElemSize(t));
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : Tensor{};
}

std::vector<uint8_t> Concat(ElemType t, const std::vector<double>& values) {
  std::vector<uint8_t> out;
  for (double v : values) {
    const std::vector<uint8_t> e = Encode(t, v);
    out.insert(out.end(), e.begin(), e.end());
  }
  return out;
}

std::vector<uint8_t> ReadBytes(Client& client, const Tensor& t) {
  const std::string s = ReadTensorOrDie(client, t);
  return std::vector<uint8_t>(s.begin(), s.end());
}

TEST_F(SmallTypesTest, FillStoresTheScalarInTheType) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  for (ElemType t : kSmallTypes) {
    SCOPED_TRACE(ElemTypeName(t));
    const double value = t == ElemType::kBool ? 1 : IsSigned(t) ? -42.5 : 200;
    Tensor out = Output(*client, {3, 5}, ElemSize(t));
    ASSERT_TRUE(client->Execute(Builtin("fill", t), {}, {out}, {ScalarOf(t, value)}).ok());
    const double stored = IsFloat(t) ? value : std::trunc(value);
    EXPECT_EQ(ReadBytes(*client, out), Concat(t, std::vector<double>(15, stored)));
  }
}

TEST_F(SmallTypesTest, CastBetweenEveryPairWithEdgeValues) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  const double inf = std::numeric_limits<double>::infinity();
  // Exact in f64; the halves' edges (65504, 65520 ties to inf; 2^-24, 2^-25 ties to 0) and every
  // integer type's limits and their neighbours.
  const std::vector<double> values = {std::nan(""),
                                      inf,
                                      -inf,
                                      -0.0,
                                      0.5,
                                      -1.5,
                                      65504,
                                      65520,
                                      std::ldexp(1.0, -24),
                                      std::ldexp(1.0, -25),
                                      127,
                                      128,
                                      -129,
                                      255,
                                      256,
                                      32767,
                                      -32769,
                                      65535,
                                      1e10,
                                      3.999};
  for (ElemType to : kAllElemTypes) {
    SCOPED_TRACE(absl::StrCat("f64 -> ", ElemTypeName(to)));
    Tensor x =
        UploadBytes(*client, Concat(ElemType::kF64, values), {values.size()}, ElemType::kF64);
    Tensor y = Output(*client, {values.size()}, ElemSize(to));
    ASSERT_TRUE(client->Execute(BuiltinKernel{"cast", ElemType::kF64, to, 0}, {x}, {y}).ok());
    const std::vector<uint8_t> got = ReadBytes(*client, y);
    const std::vector<uint8_t> want = Concat(to, values);
    for (size_t i = 0; i < values.size(); ++i) {
      const size_t es = ElemSize(to);
      const bool nan_out = IsFloat(to) && std::isnan(values[i]);  // Any NaN encoding will do.
      if (nan_out) continue;
      EXPECT_TRUE(
          std::equal(got.begin() + i * es, got.begin() + (i + 1) * es, want.begin() + i * es))
          << "value " << values[i];
    }
  }
  // Every small type to every type and back: the values each one holds survive a round trip
  // through f64, and every cast runs.
  for (ElemType from : kSmallTypes) {
    for (ElemType to : kAllElemTypes) {
      SCOPED_TRACE(absl::StrCat(ElemTypeName(from), " -> ", ElemTypeName(to)));
      const std::vector<double> small = {0, 1, 3, from == ElemType::kBool ? 1.0 : 100.0};
      Tensor x = UploadBytes(*client, Concat(from, small), {small.size()}, from);
      Tensor y = Output(*client, {small.size()}, ElemSize(to));
      ASSERT_TRUE(client->Execute(BuiltinKernel{"cast", from, to, 0}, {x}, {y}).ok());
      std::vector<double> want = small;
      if (from == ElemType::kBool) want = {0, 1, 1, 1};
      EXPECT_EQ(ReadBytes(*client, y), Concat(to, want));
    }
  }
}

TEST_F(SmallTypesTest, HalfArithmeticRoundsOnceAndAccumulatesInF32) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  for (ElemType t : {ElemType::kF16, ElemType::kBF16}) {
    SCOPED_TRACE(ElemTypeName(t));
    auto round = [t](double v) {
      return t == ElemType::kF16 ? static_cast<double>(static_cast<float>(Half(v)))
                                 : static_cast<double>(static_cast<float>(BFloat16(v)));
    };
    std::vector<double> a, b;
    for (int i = 0; i < 64; ++i) {
      a.push_back(round(std::sin(i) * 10));
      b.push_back(round(std::cos(i * 0.7) * 3));
    }
    Tensor ta = UploadBytes(*client, Concat(t, a), {8, 8}, t);
    Tensor tb = UploadBytes(*client, Concat(t, b), {8, 8}, t);
    Tensor sum = Output(*client, {8, 8}, 2), mm = Output(*client, {8, 8}, 2);
    ASSERT_TRUE(client->Execute(Builtin("add", t), {ta, tb}, {sum}).ok());
    ASSERT_TRUE(client->Execute(Builtin("matmul", t), {ta, tb}, {mm}).ok());
    std::vector<double> want_add, want_mm;
    for (int i = 0; i < 64; ++i)
      want_add.push_back(static_cast<float>(a[i]) + static_cast<float>(b[i]));
    for (int r = 0; r < 8; ++r) {
      for (int c = 0; c < 8; ++c) {
        double acc = 0;
        for (int k = 0; k < 8; ++k) acc += a[r * 8 + k] * b[k * 8 + c];
        want_mm.push_back(acc);
      }
    }
    // add is exact in f32 and rounds once: bit-for-bit. matmul: one ulp of the type.
    EXPECT_EQ(ReadBytes(*client, sum), Concat(t, want_add));
    const std::vector<uint8_t> got = ReadBytes(*client, mm);
    for (int i = 0; i < 64; ++i) {
      uint16_t h;
      std::memcpy(&h, &got[2 * i], 2);
      const double g = t == ElemType::kF16 ? static_cast<float>(Half::FromBits(h))
                                           : static_cast<float>(BFloat16::FromBits(h));
      EXPECT_NEAR(g, want_mm[i],
                  (t == ElemType::kF16 ? 1e-3 : 8e-3) * std::max(1.0, std::fabs(want_mm[i])));
    }
    // 4096 ones sum to 4096 (f16 accumulation would stall at 2048); softmax of a row sums to 1.
    Tensor ones = UploadBytes(*client, Concat(t, std::vector<double>(4096, 1.0)), {4096}, t);
    Tensor total = Output(*client, {1}, 2);
    ASSERT_TRUE(client->Execute(Builtin("sum", t), {ones}, {total}).ok());
    EXPECT_EQ(ReadBytes(*client, total), Concat(t, {4096}));
    Tensor soft = Output(*client, {8, 8}, 2);
    ASSERT_TRUE(client->Execute(Builtin("softmax", t), {ta}, {soft}).ok());
    const std::vector<uint8_t> s = ReadBytes(*client, soft);
    double row = 0;
    for (int i = 0; i < 8; ++i) {
      uint16_t h;
      std::memcpy(&h, &s[2 * i], 2);
      row += t == ElemType::kF16 ? static_cast<float>(Half::FromBits(h))
                                 : static_cast<float>(BFloat16::FromBits(h));
    }
    EXPECT_NEAR(row, 1.0, 0.02);
  }
}

TEST_F(SmallTypesTest, NarrowIntegersWrapAndBoolIsOrAnd) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  Tensor a = UploadBytes(*client, {127, 0x80, 200}, {3}, ElemType::kI8);
  Tensor b = UploadBytes(*client, {1, 0xff, 100}, {3}, ElemType::kI8);
  Tensor c = Output(*client, {3}, 1);
  ASSERT_TRUE(client->Execute(Builtin("add", ElemType::kI8), {a, b}, {c}).ok());
  EXPECT_EQ(ReadBytes(*client, c), (std::vector<uint8_t>{0x80, 0x7f, 44}));
  Tensor p = UploadBytes(*client, {0, 7, 0, 1}, {4}, ElemType::kBool);
  Tensor q = UploadBytes(*client, {0, 0, 9, 1}, {4}, ElemType::kBool);
  Tensor r = Output(*client, {4}, 1);
  ASSERT_TRUE(client->Execute(Builtin("max", ElemType::kBool), {p, q}, {r}).ok());
  EXPECT_EQ(ReadBytes(*client, r), (std::vector<uint8_t>{0, 1, 1, 1}));
  ASSERT_TRUE(client->Execute(Builtin("min", ElemType::kBool), {p, q}, {r}).ok());
  EXPECT_EQ(ReadBytes(*client, r), (std::vector<uint8_t>{0, 0, 0, 1}));
}

TEST_F(SmallTypesTest, UnsupportedCombinationsAreInvalidArgumentNamingThem) {
  // One client per refused command: on the session stream a failure is reported once, by the
  // next command or sync of that session.
  {
    auto client = Connect();
    ASSERT_NE(client, nullptr);
    Tensor p = UploadBytes(*client, {0, 1}, {2}, ElemType::kBool);
    Tensor r = Output(*client, {2}, 1);
    absl::Status s =
        Settled(*client, client->Execute(Builtin("add", ElemType::kBool), {p, p}, {r}));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()),
                ::testing::HasSubstr("'add' does not support dtype bool"));
  }
  {
    auto client = Connect();
    ASSERT_NE(client, nullptr);
    Tensor i = UploadBytes(*client, {1, 2}, {2}, ElemType::kU8);
    Tensor r = Output(*client, {2}, 1);
    absl::Status s = Settled(*client, client->Execute(Builtin("exp", ElemType::kU8), {i}, {r}));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("'exp' does not support dtype u8"));
  }
  {
    // A bool fill scalar must be 0 or 1.
    auto client = Connect();
    ASSERT_NE(client, nullptr);
    Tensor r = Output(*client, {2}, 1);
    Scalars two;
    two.elem = ElemType::kBool;
    two.uints = {2};
    absl::Status s =
        Settled(*client, client->Execute(Builtin("fill", ElemType::kBool), {}, {r}, {two}));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("does not fit in bool"));
  }
}

TEST_F(SmallTypesTest, InfoListsMatmulTypes) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto info = client->GetInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  const auto& m = info->device.matmul_types();
  for (const char* want : {"f32*f32+f32", "f16*f16+f32", "bf16*bf16+f32", "i8*i8+i8"}) {
    EXPECT_NE(std::find(m.begin(), m.end(), want), m.end()) << want;
  }
}

}  // namespace
}  // namespace cubed::integration
