#pragma once

// The last few builtin calls a backend validated, with their decoded metadata, so that a launch
// equal to one of them is not validated again (Note [Validated calls]).

#include <cstddef>
#include <cstdint>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
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
// and scalars and of its buffers' sizes, so a backend keeps the calls that passed, with their
// kernel and decoded metadata, by a hash of all of those, and a call equal in all of them takes
// that result instead of validating again. At most kMaxEntries are kept (all are dropped when a
// new one would pass that: a model's step has tens of distinct calls, not hundreds); eight kept
// round robin thrashed on any cycle of nine or more, which a model's step is. Only successes are
// kept: a call that fails is validated (and refused) every time. What depends on where the
// buffers are (overlap checks of in-place outputs, device addresses) is not part of validation
// and runs per call as before.
// Note [Prepared launches]: what a backend derives from a validated call alone (the CUDA
// backend's argument block, grid and function; Note [Prepared builtin launches] in
// cuda_execute.cc) is kept beside it, as `Prepared`, so that an equal call derives nothing
// again. `Prepared` is value-initialized when the call is first kept, and dropped with it.
struct NotPrepared {};

namespace validated_calls_internal {
// A hash of everything ValidateCall reads of a call, and their comparison.
size_t HashCall(const BuiltinCall& call, absl::Span<const uint64_t> buffer_bytes);
bool SameCall(const BuiltinCall& a, absl::Span<const uint64_t> a_bytes, const BuiltinCall& b,
              absl::Span<const uint64_t> b_bytes);
}  // namespace validated_calls_internal

template <typename Prepared>
class ValidatedCallsWith {
 public:
  static constexpr size_t kMaxEntries = 512;

  // A kept call's validation, and what its backend prepared from it (Note [Prepared launches]).
  struct Kept : ValidatedCall {
    explicit Kept(ValidatedCall v) : ValidatedCall(std::move(v)) {}
    Prepared prepared{};
  };

  // ValidateBuiltinCall of `call` on buffers of `buffer_bytes` bytes (one per buffer), or the
  // result kept for an equal call. The pointer stays valid until the next Validate;
  // errors are theirs (NOT_FOUND, INVALID_ARGUMENT), never kept. Not thread-safe: one owner
  // thread (a backend's device loop).
  absl::StatusOr<Kept*> Validate(const BuiltinCall& call, absl::Span<const uint64_t> buffer_bytes) {
    if (auto it = kept_.find(KeyView{call, buffer_bytes}); it != kept_.end()) {
      ++hits_;
      return &it->second;
    }
    ++misses_;
    absl::StatusOr<ValidatedCall> validated = ValidateBuiltinCall(call, buffer_bytes);
    if (!validated.ok()) return validated.status();
    if (kept_.size() >= kMaxEntries) kept_.clear();
    Key key{call, {buffer_bytes.begin(), buffer_bytes.end()}};
    return &kept_.insert_or_assign(std::move(key), Kept(*std::move(validated))).first->second;
  }

  // Calls answered from what was kept, and calls validated in full (tests, metrics).
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }

 private:
  // A kept call, and a call looked up (by reference: no copy per launch).
  struct Key {
    BuiltinCall call;
    absl::InlinedVector<uint64_t, kMaxBuiltinBuffers> buffer_bytes;
  };
  struct KeyView {
    const BuiltinCall& call;
    absl::Span<const uint64_t> buffer_bytes;
  };
  struct KeyHash {
    using is_transparent = void;
    size_t operator()(const Key& k) const { return (*this)(KeyView{k.call, k.buffer_bytes}); }
    size_t operator()(const KeyView& k) const {
      return validated_calls_internal::HashCall(k.call, k.buffer_bytes);
    }
  };
  struct KeyEq {
    using is_transparent = void;
    bool operator()(const Key& a, const Key& b) const {
      return (*this)(a, KeyView{b.call, b.buffer_bytes});
    }
    bool operator()(const Key& a, const KeyView& b) const {
      return validated_calls_internal::SameCall(a.call, a.buffer_bytes, b.call, b.buffer_bytes);
    }
    bool operator()(const KeyView& a, const Key& b) const { return (*this)(b, a); }
  };

  absl::flat_hash_map<Key, Kept, KeyHash, KeyEq> kept_;
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
};

// A backend's validated calls with nothing prepared beside them (the CPU backend's).
using ValidatedCalls = ValidatedCallsWith<NotPrepared>;

}  // namespace cubed::kernels
