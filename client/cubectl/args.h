#pragma once

// The command line of cubectl, parsed by hand: flags may appear anywhere, as --name=value,
// --name value, or -o value; --json and --help take no value; everything else is positional.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/elem_type.h"

namespace cubed::cubectl {

// A usage error: INVALID_ARGUMENT marked so that main exits 2 instead of 1.
absl::Status UsageError(absl::string_view message);
bool IsUsageError(const absl::Status& status);

class Args {
 public:
  // Parses argv[1..argc-1]. Usage error for a flag missing its value.
  static absl::StatusOr<Args> Parse(int argc, const char* const* argv);

  const std::vector<std::string>& positional() const { return positional_; }

  // True when --name was given at least once.
  bool Has(absl::string_view name) const;
  // The value of the last --name, or nullopt.
  std::optional<std::string> Get(absl::string_view name) const;
  // Every value of --name, in order.
  std::vector<std::string> GetAll(absl::string_view name) const;

  // Usage error naming the first flag not in `allowed`.
  absl::Status CheckAllowed(const std::vector<absl::string_view>& allowed) const;

 private:
  std::vector<std::string> positional_;
  std::vector<std::pair<std::string, std::string>> flags_;  // (name, value), in order.
};

// Parsers for flag values; each returns a usage error naming `flag` and the bad text.
absl::StatusOr<uint64_t> ParseUint(absl::string_view flag, absl::string_view text);
absl::StatusOr<absl::Duration> ParseDurationFlag(absl::string_view flag, absl::string_view text);
absl::StatusOr<ElemType> ParseDtypeFlag(absl::string_view flag, absl::string_view text);
// "2x3", "2,3" or "6": 1 .. 8 extents, each >= 1.
absl::StatusOr<std::vector<uint64_t>> ParseShape(absl::string_view flag, absl::string_view text);

}  // namespace cubed::cubectl
