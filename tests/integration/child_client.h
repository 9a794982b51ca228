#pragma once

// A client in a separate process, for tests that kill it: the integration test binary re-runs
// itself as `cubed_integration_tests --child_client=ADDRESS --child_bytes=N`.

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace cubed::integration {

// If argv asks for a child client, runs it and never returns (exit code 0 never happens: the
// child waits to be killed; it exits 1 on a failure). Otherwise returns.
void MaybeRunChildClient(int argc, char** argv);

// Starts a child client on `address` that connects, allocates `bytes` in one handle and then
// waits forever. Returns its pid once it reported that the allocation succeeded, or an error
// (the child is then already reaped).
absl::StatusOr<pid_t> StartChildClient(const std::string& address, uint64_t bytes,
                                       absl::Duration timeout);

}  // namespace cubed::integration
