#pragma once

// The list of compute backends, in one place (CONVENTIONS.md §5): no static self-registration,
// and the only code that knows which backends exist. Callers get a ComputeServer and never
// downcast it: what a backend needs from its owner (the device-lost hook, ...) goes in
// BackendOptions.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/compute/compute_server.h"

namespace cubed {

enum class BackendChoice { kAuto, kCpu, kCuda };

struct BackendOptions {
  BackendChoice backend = BackendChoice::kAuto;
  // The device's ordinal: CUDA's, or on the CPU 0 .. cpu_devices - 1 (Note [Device selection],
  // server/daemon/config.h).
  uint32_t device = 0;
  uint32_t index = 0;  // The device's index in this daemon (DeviceDescription::index).
  // CPU: how many CPU devices the daemon serves; with memory_limit 0 each gets that share of
  // the default (half of RAM).
  uint32_t cpu_devices = 1;
  uint64_t memory_limit = 0;     // Bytes; 0 = the backend's default.
  std::string kernel_cache_dir;  // On-disk cache of compiled kernels (CUDA); empty = memory only.
  // CUDA: how long the completion thread polls before it sleeps (Note [Completion spin]).
  absl::Duration completion_spin = absl::ZeroDuration();
  // Note [Device lost] (server/compute/cuda/cuda_server.h): called once, from a backend thread,
  // when the device became unusable. Null: only logged.
  absl::AnyInvocable<void(const absl::Status&)> on_device_lost;
  // TEST ONLY (Note [Lost devices], server/daemon/daemon.cc), CPU: once this file exists the
  // device's next Execute loses it, as a sticky CUDA error would. Empty: never.
  std::string test_lost_file;
};

// How many CUDA devices this machine has (cuDeviceGetCount), for --devices=all.
// FAILED_PRECONDITION saying why when this build has no CUDA backend or the driver cannot load.
absl::StatusOr<uint32_t> CudaDeviceCount();

// Creates the ComputeServer chosen by options.backend for options.device. `auto` picks CUDA when
// a driver and a device are present, else the CPU, and logs the choice. FAILED_PRECONDITION with
// the reason when an explicitly chosen backend cannot run here (an ordinal past the last CUDA
// device among them, naming how many there are); INVALID_ARGUMENT for a device the CPU backend
// does not have.
absl::StatusOr<std::unique_ptr<ComputeServer>> CreateBackend(BackendOptions options);

}  // namespace cubed
