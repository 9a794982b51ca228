#include "kernels/cpu/test_tensor.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <random>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/dtype_dispatch.h"

namespace cubed::kernels::testing {
namespace {

constexpr uint64_t kSentinel = 0x5A5A5A5A5A5A5A5Aull;

std::vector<uint64_t> Strides(const std::vector<uint64_t>& shape, Layout layout) {
  const size_t r = shape.size();
  std::vector<uint64_t> s(r);
  uint64_t step = layout == Layout::kStepped ? 2 : 1;
  switch (layout) {
    case Layout::kContiguous:
    case Layout::kStepped:
      for (size_t d = r; d-- > 0;) {
        s[d] = step;
        step *= shape[d];
      }
      break;
    case Layout::kPadded:
      for (size_t d = r; d-- > 0;) {
        s[d] = step;
        step *= shape[d] + (d + 1 == r ? 3 : 1);
      }
      break;
    case Layout::kColumnMajor:
      for (size_t d = 0; d < r; ++d) {
        s[d] = step;
        step *= shape[d];
      }
      break;
  }
  return s;
}

}  // namespace

TestTensor::TestTensor(ElemType dtype, std::vector<uint64_t> shape, Layout layout)
    : dtype_(dtype), shape_(std::move(shape)) {
  const std::vector<uint64_t> strides = Strides(shape_, layout);
  layout_.rank = static_cast<uint32_t>(shape_.size());
  for (size_t d = 0; d < shape_.size(); ++d) {
    layout_.shape[d] = shape_[d];
    layout_.strides[d] = strides[d];
  }
  buffer_len_ = layout_.SpanElements() + 2;  // Two spare elements past the end.
  storage_.assign((buffer_len_ * ElemSize(dtype_) + 7) / 8, kSentinel);
  used_.assign(buffer_len_, false);
  ForEachIndex(shape_, [&](const std::vector<uint64_t>& idx) {
    uint64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * strides[d];
    used_[off] = true;
  });
}

uint8_t* TestTensor::ElemPtr(const std::vector<uint64_t>& idx) {
  return const_cast<uint8_t*>(static_cast<const TestTensor*>(this)->ElemPtr(idx));
}

const uint8_t* TestTensor::ElemPtr(const std::vector<uint64_t>& idx) const {
  uint64_t off = 0;
  for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * layout_.strides[d];
  return reinterpret_cast<const uint8_t*>(storage_.data()) + off * ElemSize(dtype_);
}

double TestTensor::GetDouble(const std::vector<uint64_t>& idx) const {
  double out = 0;
  (void)DispatchDtype<kAllTypes>(dtype_, [&](auto tag) {
    out = Convert<double>(Get<decltype(tag)>(idx));
    return absl::OkStatus();
  });
  return out;
}

void TestTensor::SetDouble(const std::vector<uint64_t>& idx, double v) {
  (void)DispatchDtype<kAllTypes>(dtype_, [&](auto tag) {
    using T = decltype(tag);
    Set<T>(idx, std::is_integral_v<T> ? static_cast<T>(v) : Convert<T>(v));
    return absl::OkStatus();
  });
}

void TestTensor::FillRandom(uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> real(lo, hi);
  std::uniform_int_distribution<int> integer(-50, 50);
  ForEachIndex(shape_, [&](const std::vector<uint64_t>& idx) {
    if (IsFloat(dtype_)) {
      SetDouble(idx, real(rng));
    } else {
      const int v = integer(rng);
      SetDouble(idx, dtype_ == ElemType::kBool ? v % 2 : v + (IsSigned(dtype_) ? 0 : 50));
    }
  });
}

bool TestTensor::PaddingIntact() const {
  const uint32_t es = ElemSize(dtype_);
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(storage_.data());
  for (uint64_t e = 0; e < buffer_len_; ++e) {
    if (used_[e]) continue;
    for (uint32_t b = 0; b < es; ++b) {
      if (bytes[e * es + b] != 0x5A) return false;
    }
  }
  return true;
}

void ForEachIndex(const std::vector<uint64_t>& shape,
                  const std::function<void(const std::vector<uint64_t>&)>& fn) {
  for (uint64_t s : shape) {
    if (s == 0) return;
  }
  std::vector<uint64_t> idx(shape.size(), 0);
  for (;;) {
    fn(idx);
    size_t d = shape.size();
    while (d > 0) {
      --d;
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
      if (d == 0) return;
    }
    if (shape.empty()) return;
  }
}

absl::Status RunKernel(BuiltinCall call, const std::vector<TestTensor*>& tensors) {
  std::vector<uint64_t> lens;
  std::vector<TensorLayout> layouts;
  std::vector<HostBuffer> buffers;
  for (TestTensor* t : tensors) {
    lens.push_back(t->buffer_len());
    layouts.push_back(t->layout());
    buffers.push_back(t->buffer());
  }
  absl::StatusOr<std::vector<uint32_t>> meta = EncodeKernelMetadata(lens, layouts);
  if (!meta.ok()) return meta.status();
  call.metadata = kernels::ToMetadataWords(*std::move(meta));
  return RunBuiltinCpu(call, buffers);
}

const std::vector<ElemType> kEveryType(std::begin(kAllElemTypes), std::end(kAllElemTypes));
const std::vector<ElemType> kNumeric = {
    ElemType::kF32,  ElemType::kF64, ElemType::kI32, ElemType::kU32, ElemType::kI64, ElemType::kF16,
    ElemType::kBF16, ElemType::kI8,  ElemType::kU8,  ElemType::kI16, ElemType::kU16};
const std::vector<ElemType> kSignedTypes = {ElemType::kF32, ElemType::kF64, ElemType::kI32,
                                            ElemType::kI64, ElemType::kF16, ElemType::kBF16,
                                            ElemType::kI8,  ElemType::kI16};
const std::vector<ElemType> kFloatTypes = {ElemType::kF32, ElemType::kF64, ElemType::kF16,
                                           ElemType::kBF16};

double RoundTo(double v, ElemType t) {
  if (t == ElemType::kBool) return v != 0 ? 1 : 0;
  if (IsFloat(t) || std::isnan(v)) {
    switch (t) {
      case ElemType::kF32:
        return static_cast<float>(v);
      case ElemType::kF16:
        return static_cast<float>(Half(v));
      case ElemType::kBF16:
        return static_cast<float>(BFloat16(v));
      default:
        return v;
    }
  }
  const int bits = 8 * static_cast<int>(ElemSize(t));
  if (bits == 64) return v;  // Tests keep 64-bit results in range.
  const double mod = std::ldexp(1.0, bits);
  double w = std::fmod(v, mod);
  if (w < 0) w += mod;
  if (IsSigned(t) && w >= mod / 2) w -= mod;
  return w;
}

bool Close(double got, double want, ElemType t, double rel) {
  if (std::isnan(want)) return std::isnan(got);
  if (!IsFloat(t)) return got == want;
  // f16 and bf16: the kernel rounds once from f32, the reference once from double: an ulp apart.
  if (rel == 0 && t == ElemType::kF16) rel = 2e-3;
  if (rel == 0 && t == ElemType::kBF16) rel = 1.6e-2;
  if (rel == 0) rel = t == ElemType::kF32 ? 1e-5 : 1e-12;
  if (std::isinf(want)) return got == want;
  return std::fabs(got - want) <= rel * std::max(1.0, std::fabs(want));
}

std::string DtypeName(ElemType t) { return std::string(ElemTypeName(t)); }

}  // namespace cubed::kernels::testing
