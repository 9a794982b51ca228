#pragma once

// Checks a builtin call against its registry entry: the rules docs/kernel-abi.md lists. Every
// failure is INVALID_ARGUMENT naming the kernel and what was wrong.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/kernel_metadata.h"
#include "kernels/builtin.h"
#include "kernels/kernel_def.h"

namespace cubed::kernels {

// Checks dtype, scalars, metadata, that each tensor fits its buffer (`buffer_bytes`, one per
// buffer, count already matching `def`), output layouts, the shape rule and the work bound
// (reductions and matmul may not repeat input data beyond what their buffers hold, so a launch's
// work stays bounded by the memory it binds; docs/kernel-abi.md, "Work bound"). Returns the
// decoded metadata.
absl::StatusOr<KernelMetadata> ValidateCall(const KernelDef& def, const BuiltinCall& call,
                                            absl::Span<const uint64_t> buffer_bytes);

// A builtin call that passed validation: its catalogue row and its decoded metadata.
struct ValidatedCall {
  const KernelDef* def = nullptr;
  KernelMetadata meta;
};

// FindKernel and ValidateCall of `call` on buffers of `buffer_bytes` bytes (one per buffer):
// ValidateBuiltin (builtin.h) with what it found. NOT_FOUND or INVALID_ARGUMENT as those.
absl::StatusOr<ValidatedCall> ValidateBuiltinCall(const BuiltinCall& call,
                                                  absl::Span<const uint64_t> buffer_bytes);

// The float parameter (FloatParam: the norms' eps, causal_softmax's scale) of a call whose
// scalars passed validation (one f32 or f64 value), as f64.
double FloatScalar(const BuiltinCall& call);

// True when two different indices of `t` may address the same element (a conservative test:
// dims sorted by stride must each step past everything the smaller dims span).
bool MayOverlapItself(const TensorLayout& t);

// "kernel 'add': ": how every error message about a call to `def` starts.
std::string ErrorPrefix(const KernelDef& def);

// "buffer 1 (rhs)": how error messages name buffer `i` of `def`.
std::string BufferLabel(const KernelDef& def, uint32_t i);

// "[2, 3]": the first `t.rank` values of `dims`.
std::string FormatDims(const TensorLayout& t, const std::array<uint64_t, kMaxRank>& dims);

}  // namespace cubed::kernels
