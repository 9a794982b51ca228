#include "tests/fuzz/magnitude.h"

#include <cstdio>

#include "tests/fuzz/harness.h"

namespace cubed::fuzz {
namespace {

constexpr int kBuckets = 129;  // Bit lengths 0 .. 128.
constexpr Exact kSaturated = ~Exact{0};

// libFuzzer collects every non-zero byte of this section as a feature after each input and
// clears the section before the next (FuzzerExtraCounters.cpp).
__attribute__((used, section("__libfuzzer_extra_counters")))
uint8_t extra_counters[static_cast<int>(Quantity::kCount) * kBuckets];

int BitLength(Exact v) {
  int n = 0;
  for (; v != 0; v >>= 1) ++n;
  return n;
}

Exact SaturatingAdd(Exact a, Exact b) { return a > kSaturated - b ? kSaturated : a + b; }

Exact SaturatingMul(Exact a, Exact b) {
  if (a == 0 || b == 0) return 0;
  return a > kSaturated / b ? kSaturated : a * b;
}

}  // namespace

void Observe(Quantity quantity, Exact value) {
  if (Verbose()) {
    std::fprintf(stderr, "  magnitude %d: 2^%d\n", static_cast<int>(quantity), BitLength(value));
  }
  extra_counters[static_cast<int>(quantity) * kBuckets + BitLength(value)] = 1;
}

Exact ExactProduct(absl::Span<const uint64_t> values, uint64_t factor) {
  Exact p = factor;
  for (uint64_t v : values) p = SaturatingMul(p, v);
  return p;
}

void ObserveTensors(Quantity total, absl::Span<const TensorRef> tensors,
                    absl::Span<const std::optional<uint64_t>> views) {
  Exact sum = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorRef& t = tensors[i];
    const Exact bytes = ExactProduct(t.shape, t.elem_size);
    Observe(Quantity::kTensorBytes, bytes);
    Exact span = 1;  // Elements: 1 + sum((shape - 1) * stride).
    for (size_t d = 0; d < t.shape.size() && d < t.strides.size(); ++d) {
      if (t.shape[d] == 0) break;
      span = SaturatingAdd(span, SaturatingMul(t.shape[d] - 1, t.strides[d]));
    }
    span = SaturatingMul(span, t.elem_size);
    Observe(Quantity::kTensorSpan, span);
    Observe(Quantity::kOffsets, Exact{t.binding.offset_start} + t.binding.offset_end);
    if (i < views.size() && views[i].has_value() && span <= *views[i]) {
      Observe(Quantity::kBroadcast, bytes);
      sum = SaturatingAdd(sum, bytes);
    }
  }
  Observe(total, sum);
  if (sum >> 64 != 0) Observe(Quantity::kWrappedTotal, static_cast<uint64_t>(sum));
}

void ObserveBindings(absl::Span<const BindingRef> bindings) {
  for (const BindingRef& b : bindings) {
    Observe(Quantity::kOffsets, Exact{b.offset_start} + b.offset_end);
  }
}

}  // namespace cubed::fuzz
