#include "kernels/cpu/test_tensor.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"

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
  switch (dtype_) {
    case ElemType::kF32:
      return Get<float>(idx);
    case ElemType::kF64:
      return Get<double>(idx);
    case ElemType::kI32:
      return Get<int32_t>(idx);
    case ElemType::kU32:
      return Get<uint32_t>(idx);
    case ElemType::kI64:
      return static_cast<double>(Get<int64_t>(idx));
  }
  return 0;
}

void TestTensor::SetDouble(const std::vector<uint64_t>& idx, double v) {
  switch (dtype_) {
    case ElemType::kF32:
      return Set<float>(idx, static_cast<float>(v));
    case ElemType::kF64:
      return Set<double>(idx, v);
    case ElemType::kI32:
      return Set<int32_t>(idx, static_cast<int32_t>(v));
    case ElemType::kU32:
      return Set<uint32_t>(idx, static_cast<uint32_t>(v));
    case ElemType::kI64:
      return Set<int64_t>(idx, static_cast<int64_t>(v));
  }
}

void TestTensor::FillRandom(uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> real(lo, hi);
  std::uniform_int_distribution<int> integer(-50, 50);
  ForEachIndex(shape_, [&](const std::vector<uint64_t>& idx) {
    if (IsFloat(dtype_)) {
      SetDouble(idx, real(rng));
    } else {
      SetDouble(idx, integer(rng) + (dtype_ == ElemType::kU32 ? 50 : 0));
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
  call.metadata = *std::move(meta);
  return RunBuiltinCpu(call, buffers);
}

bool Close(double got, double want, ElemType t, double rel) {
  if (std::isnan(want)) return std::isnan(got);
  if (!IsFloat(t)) return got == want;
  if (rel == 0) rel = t == ElemType::kF32 ? 1e-5 : 1e-12;
  if (std::isinf(want)) return got == want;
  return std::fabs(got - want) <= rel * std::max(1.0, std::fabs(want));
}

std::string DtypeName(ElemType t) { return std::string(ElemTypeName(t)); }

}  // namespace cubed::kernels::testing
