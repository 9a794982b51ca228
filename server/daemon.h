#pragma once

// Daemon: the whole cubed process once configured: device loops, gRPC services and listeners.
// Shutdown order lives in one function (Shutdown).

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "server/config.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace cubed {

class ComputeService;
class DeviceLoop;
class HealthService;
class SessionStreamService;

class Daemon {
 public:
  // Builds the backend and the device loop, starts serving on the configured listeners, sets
  // health to SERVING and writes the ready file. FAILED_PRECONDITION / INVALID_ARGUMENT /
  // UNAVAILABLE (a listener could not bind) with the reason.
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(const DaemonConfig& config);

  // Shuts down if not done yet.
  ~Daemon();

  // Blocks until SIGTERM or SIGINT. The caller must have blocked both signals in every thread
  // (BlockTerminationSignals) before Start, so that they are delivered here only.
  static int WaitForTerminationSignal();
  static void BlockTerminationSignals();

  // New calls answered UNAVAILABLE; health NOT_SERVING; queued work finishes; stop accepting
  // and let in-flight calls finish (up to 5 s, then cancel);
  // stop the device loops, which closes every session and frees every page. Idempotent.
  void Shutdown();

 private:
  Daemon() = default;

  DaemonConfig config_;
  std::vector<std::unique_ptr<DeviceLoop>> loops_;
  std::unique_ptr<ComputeService> compute_;
  std::unique_ptr<HealthService> health_;
  std::unique_ptr<SessionStreamService> streams_;
  std::unique_ptr<grpc::Server> server_;
  bool shut_down_ = false;
};

}  // namespace cubed
