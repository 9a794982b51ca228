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

// Note [Validated calls]: HashCall and SameCall below read every field of BuiltinCall, as
// validation does; a field added to it must be added to both (or a call differing only in it
// takes another's result). This trips when BuiltinCall changes size, as a reminder (x86-64).
static_assert(sizeof(void*) != 8 || sizeof(BuiltinCall) == 160,
              "BuiltinCall changed: add its new fields to CallKey and SameCall, then this size");

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

namespace validated_calls_internal {

size_t HashCall(const BuiltinCall& call, absl::Span<const uint64_t> buffer_bytes) {
  return absl::Hash<CallKey>()(CallKey{call, buffer_bytes});
}

// Everything ValidateCall reads of a call, compared (metadata and sizes first: they differ most).
bool SameCall(const BuiltinCall& a, absl::Span<const uint64_t> a_bytes, const BuiltinCall& b,
              absl::Span<const uint64_t> b_bytes) {
  return std::equal(a_bytes.begin(), a_bytes.end(), b_bytes.begin(), b_bytes.end()) &&
         a.metadata == b.metadata && a.dtype == b.dtype && a.out_dtype == b.out_dtype &&
         a.axis == b.axis && a.index_dtype == b.index_dtype && a.allow_tf32 == b.allow_tf32 &&
         a.name == b.name && SameScalars(a.scalars, b.scalars);
}

}  // namespace validated_calls_internal
}  // namespace cubed::kernels
