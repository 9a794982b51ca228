// ValidatedCalls: Note [Validated calls] (validated_calls.h).

#include "kernels/validated_calls.h"

#include <algorithm>
#include <utility>

#include "absl/hash/hash.h"
#include "common/status_macros.h"
#include "kernels/validate.h"

namespace cubed::kernels {
namespace {

bool SameScalars(const ScalarGroups& a, const ScalarGroups& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].elem != b[i].elem || a[i].bytes != b[i].bytes) return false;
  }
  return true;
}

// Note [Validated calls]: the hash and KeyEq below read every field of BuiltinCall, as
// validation does; a field added to it must be added to both (or a call differing only in it
// takes another's result). This trips when BuiltinCall changes size, as a reminder (x86-64).
static_assert(sizeof(void*) != 8 || sizeof(BuiltinCall) == 160,
              "BuiltinCall changed: add its new fields to CallKey and KeyEq, then this size");

// Everything ValidateCall reads of a call, hashed.
struct CallKey {
  const BuiltinCall& c;
  absl::Span<const uint64_t> buffer_bytes;
  template <typename H>
  friend H AbslHashValue(H h, const CallKey& k) {
    h = H::combine(std::move(h), k.c.name, k.c.dtype, k.c.out_dtype, k.c.axis, k.c.index_dtype,
                   k.c.allow_tf32, absl::MakeConstSpan(k.c.metadata), k.buffer_bytes,
                   k.c.scalars.size());
    for (const ScalarGroup& g : k.c.scalars) {
      h = H::combine(std::move(h), g.elem, absl::MakeConstSpan(g.bytes));
    }
    return h;
  }
};

}  // namespace

size_t ValidatedCalls::KeyHash::operator()(const KeyView& k) const {
  return absl::Hash<CallKey>()(CallKey{k.call, k.buffer_bytes});
}

// Everything ValidateCall reads of a call, compared (metadata and sizes first: they differ most).
bool ValidatedCalls::KeyEq::operator()(const Key& a, const KeyView& b) const {
  return std::equal(a.buffer_bytes.begin(), a.buffer_bytes.end(), b.buffer_bytes.begin(),
                    b.buffer_bytes.end()) &&
         a.call.metadata == b.call.metadata && a.call.dtype == b.call.dtype &&
         a.call.out_dtype == b.call.out_dtype && a.call.axis == b.call.axis &&
         a.call.index_dtype == b.call.index_dtype && a.call.allow_tf32 == b.call.allow_tf32 &&
         a.call.name == b.call.name && SameScalars(a.call.scalars, b.call.scalars);
}

absl::StatusOr<const ValidatedCall*> ValidatedCalls::Validate(
    const BuiltinCall& call, absl::Span<const uint64_t> buffer_bytes) {
  if (auto it = kept_.find(KeyView{call, buffer_bytes}); it != kept_.end()) {
    ++hits_;
    return &it->second;
  }
  ++misses_;
  ASSIGN_OR_RETURN(ValidatedCall validated, ValidateBuiltinCall(call, buffer_bytes));
  if (kept_.size() >= kMaxEntries) kept_.clear();
  Key key{call, {buffer_bytes.begin(), buffer_bytes.end()}};
  return &kept_.insert_or_assign(std::move(key), std::move(validated)).first->second;
}

}  // namespace cubed::kernels
