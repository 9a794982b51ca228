#pragma once

// A test that runs part of itself in a child process (to kill it with SIGKILL, say): the test
// binary re-executes itself (/proc/self/exe) with a gtest filter and one environment variable,
// and waits until the child prints "ready".

#include <sys/types.h>

#include <string>

#include "absl/status/statusor.h"

namespace cubed::testing {

// Starts `/proc/self/exe --gtest_filter=FILTER` with `env_name`=`env_value` added and waits
// for "ready" on its stdout. Returns its pid (the caller kills and reaps it); INTERNAL with what
// the child printed when it ended before saying so.
absl::StatusOr<pid_t> StartReadyChild(const std::string& filter, const std::string& env_name,
                                      const std::string& env_value);

}  // namespace cubed::testing
