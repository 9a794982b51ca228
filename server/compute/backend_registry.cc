#include "server/compute/backend_registry.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/compute/cpu/cpu_server.h"
#include "spdlog/spdlog.h"
#ifdef CUBED_WITH_CUDA
#include "server/compute/cuda/cuda_server.h"
#endif

namespace cubed {
namespace {

std::unique_ptr<ComputeServer> CreateCpu(BackendOptions& config) {
  CpuServerOptions options;
  options.test_lost_file = config.test_lost_file;
  options.index = config.index;
  options.memory_limit = config.memory_limit;
  options.devices_sharing = config.cpu_devices;
  auto server = std::make_unique<CpuServer>(options);
  if (config.on_device_lost != nullptr) server->SetLostCallback(std::move(config.on_device_lost));
  return server;
}

absl::StatusOr<std::unique_ptr<ComputeServer>> CreateCuda(BackendOptions& config) {
#ifdef CUBED_WITH_CUDA
  CudaServerOptions options;
  options.index = config.index;
  options.ordinal = static_cast<int>(config.device);
  options.memory_limit = config.memory_limit;
  options.kernel_cache_dir = config.kernel_cache_dir;
  options.completion_spin = config.completion_spin;
  absl::StatusOr<std::unique_ptr<CudaServer>> server = CudaServer::Create(std::move(options));
  if (!server.ok()) return server.status();
  if (config.on_device_lost != nullptr) {
    (*server)->SetDeviceLostCallback(std::move(config.on_device_lost));
  }
  return std::unique_ptr<ComputeServer>(*std::move(server));
#else
  (void)config;
  return absl::FailedPreconditionError(
      "this build of cubed has no cuda backend (built without the CUDA toolkit's headers)");
#endif
}

}  // namespace

absl::StatusOr<uint32_t> CudaDeviceCount() {
#ifdef CUBED_WITH_CUDA
  return CudaServer::DeviceCount();
#else
  return absl::FailedPreconditionError(
      "this build of cubed has no cuda backend (built without the CUDA toolkit's headers)");
#endif
}

absl::StatusOr<std::unique_ptr<ComputeServer>> CreateBackend(BackendOptions config) {
  switch (config.backend) {
    case BackendChoice::kCuda: {
      absl::StatusOr<std::unique_ptr<ComputeServer>> cuda = CreateCuda(config);
      if (!cuda.ok()) {
        return absl::Status(cuda.status().code(),
                            absl::StrCat("--backend=cuda: ", cuda.status().message()));
      }
      return cuda;
    }
    case BackendChoice::kAuto: {
      absl::StatusOr<std::unique_ptr<ComputeServer>> cuda = CreateCuda(config);
      if (cuda.ok()) {
        spdlog::info("backend auto: using cuda device {}", config.device);
        return cuda;
      }
      spdlog::info("backend auto: cuda is not usable here ({}); using the cpu",
                   std::string(cuda.status().message()));
      [[fallthrough]];
    }
    case BackendChoice::kCpu:
      if (config.device >= config.cpu_devices) {
        return absl::InvalidArgumentError(absl::StrCat(
            "device ", config.device, ": the cpu backend has ",
            config.cpu_devices == 1 ? "one device, 0"
                                    : absl::StrCat("devices 0 .. ", config.cpu_devices - 1),
            " (--cpu_devices)"));
      }
      return CreateCpu(config);
  }
  return absl::InternalError("unknown backend choice");
}

}  // namespace cubed
