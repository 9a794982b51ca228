#pragma once

// The parsed command line of one cubectl command (cli.h parses it with CLI11), and the parsers
// of flag values that turn bad text into usage errors.

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

// The command's words ("session", "open"), then its operands; and each flag given, by name
// without dashes ("dtype", "o"), with its values in the order given. A flag without a value
// (--json) has the value "true".
class Args {
 public:
  Args() = default;
  Args(std::vector<std::string> positional, std::vector<std::pair<std::string, std::string>> flags)
      : positional_(std::move(positional)), flags_(std::move(flags)) {}

  const std::vector<std::string>& positional() const { return positional_; }

  // True when --name was given at least once.
  bool Has(absl::string_view name) const;
  // The value of the last --name, or nullopt.
  std::optional<std::string> Get(absl::string_view name) const;
  // Every value of --name, in order.
  std::vector<std::string> GetAll(absl::string_view name) const;

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
