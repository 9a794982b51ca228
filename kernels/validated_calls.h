#pragma once

// The last few builtin calls a backend validated, with their decoded metadata, so that a launch
// equal to one of them is not validated again (Note [Validated calls]).

#include <array>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/kernel_metadata.h"
#include "kernels/builtin.h"
#include "kernels/kernel_def.h"
#include "kernels/validate.h"

namespace cubed::kernels {

// Note [Validated calls]
// A device loop runs the same launch over and over (a pipeline of fills, a model's layers step
// after step), and validating a builtin call (the catalogue search by name, the metadata's
// decode, every check of docs/kernel-abi.md) was ~15% of the CPU backend's loop per tiny
// command. Validation is a pure function of the call's kernel, types, axis, tf32 flag, metadata
// and scalars and of its buffers' sizes, so a backend keeps the last few calls that passed, with
// their kernel and decoded metadata, and a call equal in all of those takes that result instead
// of validating again. Only successes are kept: a call that fails is validated (and refused)
// every time. What depends on where the buffers are (overlap checks of in-place outputs, device
// addresses) is not part of validation and runs per call as before.
class ValidatedCalls {
 public:
  // ValidateBuiltinCall of `call` on buffers of `buffer_bytes` bytes (one per buffer), or the
  // result kept for an equal call. The pointer stays valid until the next Validate;
  // errors are theirs (NOT_FOUND, INVALID_ARGUMENT), never kept. Not thread-safe: one owner
  // thread (a backend's device loop).
  absl::StatusOr<const ValidatedCall*> Validate(const BuiltinCall& call,
                                                absl::Span<const uint64_t> buffer_bytes);

  // Calls answered from what was kept, and calls validated in full (tests, metrics).
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }

 private:
  static constexpr size_t kEntries = 8;
  struct Entry {
    bool used = false;
    BuiltinCall call;
    absl::InlinedVector<uint64_t, kMaxBuiltinBuffers> buffer_bytes;
    ValidatedCall validated;
  };

  std::array<Entry, kEntries> entries_;
  size_t next_ = 0;  // The entry the next miss replaces (round robin).
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
};

}  // namespace cubed::kernels
