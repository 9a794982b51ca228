#include "server/compute/cuda/cuda_test_util.h"

#include <random>

#include "absl/synchronization/notification.h"
#include "common/cuda/cuda_driver.h"

namespace cubed::testing_cuda {

bool CudaDevicePresent(std::string* why) {
  absl::StatusOr<const CudaDriver*> driver = LoadCudaDriver();
  if (!driver.ok()) {
    if (why != nullptr) *why = std::string(driver.status().message());
    return false;
  }
  int count = 0;
  if (Cu().DeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
    if (why != nullptr) *why = "the driver sees no device";
    return false;
  }
  return true;
}

std::unique_ptr<CudaServer> MakeCudaServer(uint64_t memory_limit) {
  CudaServerOptions options;
  options.memory_limit = memory_limit;
  absl::StatusOr<std::unique_ptr<CudaServer>> server = CudaServer::Create(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

namespace {

template <typename T, typename Start>
absl::StatusOr<T> Wait(Start start) {
  absl::Notification done;
  absl::StatusOr<T> result;
  start([&](absl::StatusOr<T> r) {
    result = std::move(r);
    done.Notify();
  });
  done.WaitForNotification();
  return result;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ReadAll(ComputeServer& server,
                                                 std::vector<ResolvedBinding> bindings) {
  std::vector<std::string> out;
  absl::Notification done;
  absl::Status status;
  server.Read(std::move(bindings), &out, [&](absl::Status s) {
    status = s;
    done.Notify();
  });
  done.WaitForNotification();
  if (!status.ok()) return status;
  return out;
}

absl::StatusOr<std::vector<std::string>> ReadTensors(ComputeServer& server,
                                                     std::vector<ResolvedTensor> tensors) {
  std::vector<std::string> out;
  absl::Notification done;
  absl::Status status;
  server.ReadTensor(std::move(tensors), &out, [&](absl::Status s) {
    status = s;
    done.Notify();
  });
  done.WaitForNotification();
  if (!status.ok()) return status;
  return out;
}

absl::Status SyncNow(ComputeServer& server) {
  absl::Notification done;
  absl::Status status;
  server.Sync([&](absl::Status s) {
    status = s;
    done.Notify();
  });
  done.WaitForNotification();
  return status;
}

absl::StatusOr<absl::Duration> EndProfileNow(ComputeServer& server, ProfileToken token) {
  return Wait<absl::Duration>([&](auto callback) { server.EndProfile(token, callback); });
}

std::string RandomBytes(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string bytes(count, '\0');
  for (char& c : bytes) c = static_cast<char>(rng() & 0xff);
  return bytes;
}

}  // namespace cubed::testing_cuda
