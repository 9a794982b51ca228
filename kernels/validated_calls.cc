// ValidatedCalls: Note [Validated calls] (validated_calls.h).

#include "kernels/validated_calls.h"

#include <algorithm>
#include <utility>

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

// Everything ValidateCall reads of a call, compared (metadata and sizes first: they differ most).
bool SameCall(const BuiltinCall& a, const BuiltinCall& b) {
  return a.metadata == b.metadata && a.dtype == b.dtype && a.out_dtype == b.out_dtype &&
         a.axis == b.axis && a.index_dtype == b.index_dtype && a.allow_tf32 == b.allow_tf32 &&
         a.name == b.name && SameScalars(a.scalars, b.scalars);
}

}  // namespace

absl::StatusOr<const ValidatedCall*> ValidatedCalls::Validate(
    const BuiltinCall& call, absl::Span<const uint64_t> buffer_bytes) {
  for (const Entry& e : entries_) {
    if (e.used &&
        std::equal(e.buffer_bytes.begin(), e.buffer_bytes.end(), buffer_bytes.begin(),
                   buffer_bytes.end()) &&
        SameCall(e.call, call)) {
      ++hits_;
      return &e.validated;
    }
  }
  ++misses_;
  ASSIGN_OR_RETURN(ValidatedCall validated, ValidateBuiltinCall(call, buffer_bytes));
  Entry& e = entries_[next_];
  next_ = (next_ + 1) % kEntries;
  e.used = true;
  e.call = call;
  e.buffer_bytes.assign(buffer_bytes.begin(), buffer_bytes.end());
  e.validated = std::move(validated);
  return &e.validated;
}

}  // namespace cubed::kernels
