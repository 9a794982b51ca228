#include "server/backend_registry.h"

#include "absl/status/status.h"
#include "server/cpu_server.h"
#include "spdlog/spdlog.h"

namespace cubed {
namespace {

std::unique_ptr<ComputeServer> CreateCpu(const DaemonConfig& config) {
  CpuServerOptions options;
  options.index = 0;
  options.memory_limit = config.memory_limit;
  return std::make_unique<CpuServer>(options);
}

constexpr char kNoCuda[] =
    "the cuda backend is not part of this build of cubed yet; use --backend=cpu (or auto)";

}  // namespace

absl::StatusOr<std::unique_ptr<ComputeServer>> CreateBackend(const DaemonConfig& config) {
  switch (config.backend) {
    case BackendChoice::kCuda:
      return absl::FailedPreconditionError(kNoCuda);
    case BackendChoice::kAuto:
      spdlog::info("backend auto: no cuda backend in this build; using the cpu");
      [[fallthrough]];
    case BackendChoice::kCpu:
      if (config.device != 0) {
        return absl::InvalidArgumentError("--device: the cpu backend has one device, 0");
      }
      return CreateCpu(config);
  }
  return absl::InternalError("unknown backend choice");
}

}  // namespace cubed
