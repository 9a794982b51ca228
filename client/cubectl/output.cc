#include "client/cubectl/output.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace cubed::cubectl {

std::string HumanSize(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024 && unit < 6) {
    v /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.2f %s", v, kUnits[unit]);
}

Field TextField(absl::string_view key, absl::string_view value) {
  return {std::string(key), std::string(value), JsonQuote(value), ""};
}

Field NumberField(absl::string_view key, uint64_t value) {
  return {std::string(key), absl::StrCat(value), absl::StrCat(value), ""};
}

Field IdField(absl::string_view key, uint64_t id) {
  return {std::string(key), absl::StrCat(id), absl::StrCat("\"", id, "\""), ""};
}

Field SizeField(absl::string_view key, uint64_t bytes) {
  std::string text =
      bytes < 1024 ? HumanSize(bytes) : absl::StrCat(HumanSize(bytes), " (", bytes, " bytes)");
  return {std::string(key), std::move(text), absl::StrCat(bytes), ""};
}

Field DurationField(absl::string_view key, absl::Duration d) {
  return {std::string(key), absl::FormatDuration(d), absl::StrCat(absl::ToInt64Nanoseconds(d)),
          absl::StrCat(key, "_ns")};
}

Field ListField(absl::string_view key, const std::vector<std::string>& values) {
  std::vector<std::string> quoted;
  for (const auto& v : values) quoted.push_back(JsonQuote(v));
  return {std::string(key), values.empty() ? "-" : absl::StrJoin(values, ", "),
          absl::StrCat("[", absl::StrJoin(quoted, ", "), "]"), ""};
}

Field ShapeField(absl::string_view key, const std::vector<uint64_t>& values) {
  return {std::string(key), absl::StrJoin(values, "x"),
          absl::StrCat("[", absl::StrJoin(values, ", "), "]"), ""};
}

Field RawField(absl::string_view key, std::string text, std::string json) {
  return {std::string(key), std::move(text), std::move(json), ""};
}

void PrintReport(const std::vector<Field>& fields, bool json, std::ostream& out) {
  if (json) {
    std::vector<std::string> members;
    for (const auto& f : fields)
      members.push_back(
          absl::StrCat(JsonQuote(f.json_key.empty() ? f.key : f.json_key), ": ", f.json));
    out << "{" << absl::StrJoin(members, ", ") << "}\n";
    return;
  }
  size_t width = 0;
  for (const auto& f : fields) width = std::max(width, f.key.size());
  for (const auto& f : fields) {
    out << f.key << std::string(width - f.key.size() + 2, ' ') << f.text << "\n";
  }
}

}  // namespace cubed::cubectl
