#pragma once

// Logging setup for the daemon and tools: spdlog, one line per event, to stderr.

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace cubed {

// Sends logs to stderr and sets the global spdlog level from a name: trace, debug, info, warn,
// error, off.
// INVALID_ARGUMENT naming the text when it is not one of those.
absl::Status SetLogLevel(absl::string_view level);

}  // namespace cubed
