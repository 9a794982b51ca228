#include "common/checked_math.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cubed {

absl::StatusOr<uint64_t> TensorBytes(absl::Span<const uint64_t> shape, uint64_t elem_size,
                                     absl::string_view what) {
  std::optional<uint64_t> count = CheckedProduct(shape);
  std::optional<uint64_t> bytes = count ? CheckedMul(*count, elem_size) : std::nullopt;
  if (!bytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": shape [", absl::StrJoin(shape, ", "),
                                                   "] times elem_size ", elem_size,
                                                   " overflows 64 bits"));
  }
  return *bytes;
}

absl::StatusOr<uint64_t> CheckedSum(uint64_t a, uint64_t b, absl::string_view what) {
  std::optional<uint64_t> sum = CheckedAdd(a, b);
  if (!sum) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", a, " + ", b, " bytes overflows 64 bits"));
  }
  return *sum;
}

}  // namespace cubed
