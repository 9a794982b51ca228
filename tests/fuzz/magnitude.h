#pragma once

// Note [Magnitude feedback]: coverage alone does not lead the fuzzer to sizes that overflow. A
// read of 2^62 bytes is refused on the same branch as a read of 2 MiB, so libFuzzer keeps
// neither, and a request whose sizes wrap past 2^64 (four bindings of 2^62 bytes each sum to 0)
// must be guessed whole, every operand at once. So the harness computes exactly (128-bit,
// saturating) the sizes that a request's client-controlled numbers imply (a tensor's dense bytes
// and span, the total of a read, a binding's offsets, an allocation, the end of an upload chunk)
// and marks one libFuzzer extra counter per (quantity, bit length of the value). A request that
// reaches a new order of magnitude is new coverage and is kept, so the fuzzer climbs towards
// 2^64, where the daemon's 64-bit arithmetic wraps, one operand at a time. The totals of a read
// count only the bindings the daemon would accept one by one (a known handle whose view holds
// the tensor's span: a broadcast, stride 0, is what makes a small handle read as a huge
// tensor), and past 2^64 a total also marks the bit length of what is left after wrapping (the
// value an unchecked 64-bit sum would hold), so the fuzzer is led on down towards a wrapped total
// small enough to pass a limit.

#include <cstdint>
#include <optional>

#include "absl/types/span.h"
#include "server/channel/commands.h"

namespace cubed::fuzz {

// What a value measures; each has its own counters, so that each climbs on its own.
enum class Quantity : uint8_t {
  kTensorBytes,      // product(shape) * elem_size of any tensor in a request.
  kTensorSpan,       // Bytes a tensor's shape and strides address.
  kBroadcast,        // Dense bytes of a tensor whose span fits its binding's view.
  kReadTotal,        // Dense bytes of the acceptable bindings of a unary ReadTensor.
  kStreamReadTotal,  // The same for a stream read_tensor (plain or bulk).
  kWrappedTotal,     // Either total modulo 2^64, when it is 2^64 or more.
  kOffsets,          // offset_start + offset_end of a binding.
  kAllocation,       // Bytes a create / empty asks for.
  kUploadEnd,        // offset + bytes of an upload chunk.
  kCount,
};

using Exact = unsigned __int128;

// Marks the counter of `quantity` for the bit length of `value` (0 .. 128).
void Observe(Quantity quantity, Exact value);

// product(values) * factor, saturating at 2^128 - 1.
Exact ExactProduct(absl::Span<const uint64_t> values, uint64_t factor);

// Observes each tensor's dense bytes, span and offsets, and as `total` the dense bytes of those
// whose span fits `views[i]` (the bytes its binding holds; nullopt: unknown, not counted).
void ObserveTensors(Quantity total, absl::Span<const TensorRef> tensors,
                    absl::Span<const std::optional<uint64_t>> views);
// Observes each binding's offsets.
void ObserveBindings(absl::Span<const BindingRef> bindings);

}  // namespace cubed::fuzz
