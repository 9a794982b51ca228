#include "client/cubectl/args.h"

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/kernel_metadata.h"

namespace cubed::cubectl {
namespace {

constexpr char kUsagePayload[] = "type.googleapis.com/cubectl.UsageError";

}  // namespace

absl::Status UsageError(absl::string_view message) {
  absl::Status status = absl::InvalidArgumentError(message);
  status.SetPayload(kUsagePayload, absl::Cord("1"));
  return status;
}

bool IsUsageError(const absl::Status& status) {
  return status.GetPayload(kUsagePayload).has_value();
}

bool Args::Has(absl::string_view name) const { return Get(name).has_value(); }

std::optional<std::string> Args::Get(absl::string_view name) const {
  for (auto it = flags_.rbegin(); it != flags_.rend(); ++it) {
    if (it->first == name) return it->second;
  }
  return std::nullopt;
}

std::vector<std::string> Args::GetAll(absl::string_view name) const {
  std::vector<std::string> values;
  for (const auto& [n, v] : flags_) {
    if (n == name) values.push_back(v);
  }
  return values;
}

absl::StatusOr<uint64_t> ParseUint(absl::string_view flag, absl::string_view text) {
  uint64_t v;
  if (!absl::SimpleAtoi(text, &v)) {
    return UsageError(absl::StrCat(flag, ": '", text, "' is not a non-negative integer"));
  }
  return v;
}

absl::StatusOr<absl::Duration> ParseDurationFlag(absl::string_view flag, absl::string_view text) {
  absl::Duration d;
  if (!absl::ParseDuration(std::string(text), &d) || d < absl::ZeroDuration()) {
    return UsageError(
        absl::StrCat(flag, ": '", text, "' is not a duration (examples: 30s, 10m, 1h30m)"));
  }
  return d;
}

absl::StatusOr<ElemType> ParseDtypeFlag(absl::string_view flag, absl::string_view text) {
  absl::StatusOr<ElemType> t = ParseElemType(text);
  if (!t.ok()) return UsageError(absl::StrCat(flag, ": ", t.status().message()));
  return t;
}

absl::StatusOr<std::vector<uint64_t>> ParseShape(absl::string_view flag, absl::string_view text) {
  std::vector<uint64_t> shape;
  for (absl::string_view part : absl::StrSplit(text, absl::ByAnyChar("x,"))) {
    uint64_t v;
    if (!absl::SimpleAtoi(part, &v) || v == 0) {
      return UsageError(absl::StrCat(flag, ": shape '", text,
                                     "' must be extents >= 1 separated by 'x' or ',', e.g. 2x3"));
    }
    shape.push_back(v);
  }
  if (shape.size() > kMaxRank) {
    return UsageError(
        absl::StrCat(flag, ": shape '", text, "' has more than ", kMaxRank, " dimensions"));
  }
  return shape;
}

}  // namespace cubed::cubectl
