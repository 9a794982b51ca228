#pragma once

// The 16-bit float and 8-bit bool element types of the CPU kernels (common/elem_type.h), for the
// kernels and for clients: storage structs that convert to float exactly and from float, double and
// integers with one rounding to nearest even (bit-exact, subnormals included, overflow to +-inf,
// NaN stays NaN with its sign). Arithmetic on them happens in float through the implicit
// conversion, so the kernels' generic code computes half types in f32 and rounds once on store.
// Bool8 reads any non-zero byte as true and writes 0 or 1. Plain values; no thread-safety concerns.

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace cubed {

// Bits of a float format: `kMant` stored mantissa bits, exponent bias `kBias`.
template <int kMant, int kBias>
struct HalfFormat {
  static constexpr uint16_t kInf = static_cast<uint16_t>(((2 * kBias + 1) << kMant));
  static constexpr uint16_t kQuietNan = static_cast<uint16_t>(kInf | (1u << (kMant - 1)));

  // Rounds sign * sig * 2^exp2 (sig != 0) to nearest even.
  static uint16_t Round(bool neg, uint64_t sig, int exp2) {
    const uint16_t sign = neg ? 0x8000 : 0;
    const int top = 63 - __builtin_clzll(sig);
    const int e = top + exp2;  // Value is in [2^e, 2^(e+1)).
    if (e > kBias) return sign | kInf;
    // Lowest kept bit: kMant below the leading one, never below the smallest subnormal's.
    const int keep_from = (e >= 1 - kBias ? e - kMant : 1 - kBias - kMant) - exp2;
    uint64_t q;
    if (keep_from <= 0) {
      q = sig << -keep_from;
    } else if (keep_from > 64) {
      q = 0;
    } else {
      const uint64_t rest = keep_from == 64 ? sig : sig & ((uint64_t{1} << keep_from) - 1);
      const uint64_t half = uint64_t{1} << (keep_from - 1);
      q = keep_from == 64 ? 0 : sig >> keep_from;
      if (rest > half || (rest == half && (q & 1) != 0)) ++q;
    }
    // A normal's implicit bit adds into the exponent field; a carry out of the mantissa moves the
    // exponent up (and reaches infinity's encoding exactly at overflow).
    const uint64_t bits = e >= 1 - kBias ? (uint64_t(e + kBias - 1) << kMant) + q : q;
    return bits >= kInf ? (sign | kInf) : static_cast<uint16_t>(sign | bits);
  }

  static uint16_t FromDouble(double d) {
    uint64_t u;
    std::memcpy(&u, &d, 8);
    const bool neg = (u >> 63) != 0;
    const int ex = static_cast<int>((u >> 52) & 0x7ff);
    const uint64_t man = u & ((uint64_t{1} << 52) - 1);
    if (ex == 0x7ff) return (neg ? 0x8000 : 0) | (man != 0 ? kQuietNan : kInf);
    if (ex == 0 && man == 0) return neg ? 0x8000 : 0;
    if (ex == 0) return Round(neg, man, -1074);
    return Round(neg, man | (uint64_t{1} << 52), ex - 1075);
  }

  template <typename I>
  static uint16_t FromInt(I i) {
    if (i == 0) return 0;
    if constexpr (std::is_signed_v<I>) {
      const bool neg = i < 0;
      const uint64_t mag = neg ? uint64_t{0} - static_cast<uint64_t>(i) : static_cast<uint64_t>(i);
      return Round(neg, mag, 0);
    } else {
      return Round(false, static_cast<uint64_t>(i), 0);
    }
  }

  static float ToFloat(uint16_t h) {
    const uint32_t sign = uint32_t{h & 0x8000u} << 16;
    const uint32_t ex = (h >> kMant) & (2 * kBias + 1);
    const uint32_t man = h & ((1u << kMant) - 1);
    uint32_t f;
    if (ex == 2u * kBias + 1) {
      f = sign | 0x7f800000u | (man << (23 - kMant));
    } else if (ex == 0) {
      // Subnormal (or zero): man * 2^(1 - bias - mant), exact in float.
      float v = static_cast<float>(man);
      for (int s = 0; s < kBias - 1 + kMant; ++s) v *= 0.5f;
      std::memcpy(&f, &v, 4);
      f |= sign;
    } else {
      f = sign | ((ex - kBias + 127) << 23) | (man << (23 - kMant));
    }
    float out;
    std::memcpy(&out, &f, 4);
    return out;
  }
};

using F16Format = HalfFormat<10, 15>;

// bf16 from float: round the low 16 bits away, to nearest even (overflow carries into inf).
inline uint16_t FloatToBf16Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

struct BFloat16Format {
  static constexpr uint16_t kInf = 0x7f80;
  static constexpr uint16_t kQuietNan = 0x7fc0;
  static uint16_t FromFloat(float x) { return FloatToBf16Bits(x); }
  static uint16_t FromDouble(double d) { return HalfFormat<7, 127>::FromDouble(d); }
  template <typename I>
  static uint16_t FromInt(I i) {
    return HalfFormat<7, 127>::FromInt(i);
  }
  static float ToFloat(uint16_t h) {
    const uint32_t f = uint32_t{h} << 16;
    float out;
    std::memcpy(&out, &f, 4);
    return out;
  }
};

struct F16FormatOps : F16Format {
  static uint16_t FromFloat(float x) { return FromDouble(x); }
};

template <typename Format>
struct HalfType {
  uint16_t bits;

  HalfType() = default;
  HalfType(float x) : bits(Format::FromFloat(x)) {}  // NOLINT: computed values store implicitly.
  explicit HalfType(double x) : bits(Format::FromDouble(x)) {}
  template <typename I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
  HalfType(I i) : bits(Format::FromInt(i)) {}  // NOLINT
  static HalfType FromBits(uint16_t b) {
    HalfType h;
    h.bits = b;
    return h;
  }
  operator float() const { return Format::ToFloat(bits); }  // NOLINT
};

using Half = HalfType<F16FormatOps>;
using BFloat16 = HalfType<BFloat16Format>;

struct Bool8 {
  uint8_t v;

  Bool8() = default;
  Bool8(bool b) : v(b ? 1 : 0) {}           // NOLINT
  operator bool() const { return v != 0; }  // NOLINT
};

// f16 and bf16.
template <typename T>
inline constexpr bool kIsHalf = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
// Floating point: float, double, f16 and bf16.
template <typename T>
inline constexpr bool kIsFloat = std::is_floating_point_v<T> || kIsHalf<T>;

// The type a kernel computes T in: float for f16 and bf16, T itself otherwise.
template <typename T>
using ComputeType = std::conditional_t<kIsHalf<T>, float, T>;

}  // namespace cubed

namespace std {

template <typename Format>
class numeric_limits<cubed::HalfType<Format>> {
  using H = cubed::HalfType<Format>;

 public:
  static constexpr bool is_specialized = true;
  static constexpr bool is_integer = false;
  static constexpr bool is_signed = true;
  static constexpr bool has_quiet_NaN = true;
  static constexpr bool has_infinity = true;
  static H infinity() { return H::FromBits(Format::kInf); }
  static H quiet_NaN() { return H::FromBits(Format::kQuietNan); }
  static H max() { return H::FromBits(Format::kInf - 1); }
  static H lowest() { return H::FromBits(0x8000 | (Format::kInf - 1)); }
};

template <>
class numeric_limits<cubed::Bool8> {
 public:
  static constexpr bool is_specialized = true;
  static constexpr bool is_integer = true;
  static constexpr bool is_signed = false;
  static cubed::Bool8 max() { return true; }
  static cubed::Bool8 min() { return false; }
  static cubed::Bool8 lowest() { return false; }
};

}  // namespace std
