#include "common/half.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "gtest/gtest.h"

namespace cubed {
namespace {

uint16_t F16(double d) { return Half(d).bits; }
uint16_t F16f(float f) { return Half(f).bits; }
uint16_t Bf16(double d) { return BFloat16(d).bits; }
uint16_t Bf16f(float f) { return BFloat16(f).bits; }

TEST(HalfTest, F16KnownEncodings) {
  EXPECT_EQ(F16(1.0), 0x3c00);
  EXPECT_EQ(F16(-2.0), 0xc000);
  EXPECT_EQ(F16(65504.0), 0x7bff);
  EXPECT_EQ(F16(65519.99), 0x7bff);              // Below the midpoint to infinity.
  EXPECT_EQ(F16(65520.0), 0x7c00);               // The midpoint rounds to even: infinity.
  EXPECT_EQ(F16(std::ldexp(1.0, -24)), 0x0001);  // Smallest subnormal.
  EXPECT_EQ(F16(std::ldexp(1.0, -25)), 0x0000);  // Half of it: tie to even (0).
  EXPECT_EQ(F16(std::ldexp(1.5, -25)), 0x0001);
  EXPECT_EQ(F16(std::ldexp(3.0, -25)), 0x0002);     // 1.5 ulp: tie to even (2).
  EXPECT_EQ(F16(std::ldexp(1.0, -14)), 0x0400);     // Smallest normal.
  EXPECT_EQ(F16(std::ldexp(1023.5, -24)), 0x0400);  // Subnormal rounding up into the normals.
  EXPECT_EQ(F16(-0.0), 0x8000);
  EXPECT_EQ(F16(1.0 + std::ldexp(1.0, -11)), 0x3c00);  // Tie: even.
  EXPECT_EQ(F16(1.0 + std::ldexp(3.0, -11)), 0x3c02);  // Tie: even (up).
  EXPECT_EQ(F16(std::numeric_limits<double>::infinity()), 0x7c00);
  EXPECT_EQ(F16(-std::numeric_limits<double>::infinity()), 0xfc00);
  EXPECT_EQ(F16(std::nan("")) & 0x7fff, 0x7e00);
  EXPECT_EQ(F16f(0.1f), 0x2e66);
  EXPECT_EQ(Half(2049).bits, 0x6800);  // 2049 ties to 2048.
  EXPECT_EQ(Half(2051).bits, 0x6802);  // 2051 ties to 2052.
  EXPECT_EQ(Half(-70000).bits, 0xfc00);
  EXPECT_EQ(Half(int64_t{-9223372036854775807 - 1}).bits, 0xfc00);
}

TEST(HalfTest, F16RoundTripsEveryEncoding) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const Half h = Half::FromBits(static_cast<uint16_t>(b));
    const float f = h;
    if (std::isnan(f)) {
      EXPECT_EQ((b & 0x7c00), 0x7c00u);
      continue;
    }
    EXPECT_EQ(Half(f).bits, b) << b;
    EXPECT_EQ(Half(static_cast<double>(f)).bits, b) << b;
  }
}

TEST(HalfTest, Bf16KnownEncodings) {
  EXPECT_EQ(Bf16(1.0), 0x3f80);
  EXPECT_EQ(Bf16f(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // Tie: even.
  EXPECT_EQ(Bf16f(1.0f + std::ldexp(3.0f, -8)), 0x3f82);
  EXPECT_EQ(Bf16f(std::numeric_limits<float>::max()), 0x7f80);  // Rounds up to infinity.
  EXPECT_EQ(Bf16f(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(Bf16f(std::ldexp(1.0f, -133)), 0x0001);  // Smallest bf16 subnormal.
  EXPECT_EQ(Bf16f(-0.0f), 0x8000);
  EXPECT_EQ(Bf16f(std::nanf("")) & 0x7fc0, 0x7fc0);
  // Straight from double, no double rounding through f32: 1 + 2^-8 + 2^-30 rounds up.
  EXPECT_EQ(Bf16(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30)), 0x3f81);
  // Straight from an integer: 2^31 + 2^23 + 1 rounds up (through f32 it would tie to even).
  EXPECT_EQ(BFloat16(int64_t{2147483648} + 8388608 + 1).bits, 0x4f01);
  EXPECT_EQ(static_cast<float>(BFloat16::FromBits(0x0001)), std::ldexp(1.0f, -133));
}

TEST(HalfTest, Bf16RoundTripsEveryEncoding) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = BFloat16::FromBits(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    EXPECT_EQ(BFloat16(f).bits, b) << b;
    EXPECT_EQ(BFloat16(static_cast<double>(f)).bits, b) << b;
  }
}

TEST(HalfTest, Bool8ReadsAnyNonZeroByteAsTrue) {
  Bool8 b;
  b.v = 7;
  EXPECT_TRUE(static_cast<bool>(b));
  EXPECT_EQ(Bool8(true).v, 1);
  EXPECT_EQ(Bool8(false).v, 0);
}

}  // namespace
}  // namespace cubed
