#pragma once

// HealthService: grpc.health.v1.Health, compiled from Debian's grpc-proto so that reflection can
// describe it. Serves the overall status ("") and "cubed.v1.Compute", SERVING only while
// SetServing(true) holds, every device loop answers (SetLoopsResponsive) and at least one device
// serves; and one name per device, "device/0", "device/1", ..., SERVING while the daemon serves,
// its loops answer and that device is not lost (SetDeviceServing; Note [Lost devices],
// server/daemon/daemon.cc).

#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace cubed {

// Thread-safe.
class HealthService final : public grpc::health::v1::Health::CallbackService {
 public:
  // Serves `devices` per-device names, "device/0" .. "device/<devices - 1>", each SERVING at
  // first (once SetServing(true)).
  explicit HealthService(uint32_t devices = 1);
  ~HealthService() override;

  // Sets every served name to SERVING (true) or NOT_SERVING (false) and tells all watchers.
  void SetServing(bool serving);
  // Whether every device loop answers its liveness pings (server/daemon/liveness_monitor.h); starts
  // true. While false every served name is NOT_SERVING, whatever SetServing said.
  void SetLoopsResponsive(bool responsive);
  // Whether device `index` serves (false once it is lost); out-of-range indices are ignored.
  void SetDeviceServing(uint32_t index, bool serving);
  // The health name of device `index`: "device/<index>".
  static std::string DeviceServiceName(uint32_t index);
  // Ends every Watch stream (before the server shuts down, which waits for them).
  void Shutdown();

  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* ctx,
                                  const grpc::health::v1::HealthCheckRequest* req,
                                  grpc::health::v1::HealthCheckResponse* resp) override;
  grpc::ServerWriteReactor<grpc::health::v1::HealthCheckResponse>* Watch(
      grpc::CallbackServerContext* ctx, const grpc::health::v1::HealthCheckRequest* req) override;

  class Watcher;

 private:
  friend class Watcher;
  // The status of a service name, or SERVICE_UNKNOWN.
  grpc::health::v1::HealthCheckResponse::ServingStatus StatusOf(const std::string& service) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void Forget(Watcher* watcher);

  mutable absl::Mutex mu_;
  bool serving_ ABSL_GUARDED_BY(mu_) = false;
  bool loops_responsive_ ABSL_GUARDED_BY(mu_) = true;
  std::vector<bool> device_serving_ ABSL_GUARDED_BY(mu_);  // By index.
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  std::set<Watcher*> watchers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cubed
