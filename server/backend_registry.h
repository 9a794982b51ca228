#pragma once

// The list of compute backends, in one place (CONVENTIONS.md §5): no static self-registration.

#include <memory>

#include "absl/status/statusor.h"
#include "server/compute_server.h"
#include "server/config.h"

namespace cubed {

// Creates the ComputeServer chosen by config.backend for config.device. `auto` picks CUDA when a
// driver and a device are present, else the CPU, and logs the choice. FAILED_PRECONDITION with
// the reason when an explicitly chosen backend cannot run here.
absl::StatusOr<std::unique_ptr<ComputeServer>> CreateBackend(const DaemonConfig& config);

}  // namespace cubed
