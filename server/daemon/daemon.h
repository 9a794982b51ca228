#pragma once

// Daemon: the whole cubed process once configured: device loops, gRPC services and listeners.
// Shutdown order lives in one function (Shutdown).

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/auth/auth_policy.h"
#include "server/daemon/config.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace cubed {

class Authenticator;
class CallCounter;
class ComputeService;
class DeviceLoop;
class HealthService;
class LivenessMonitor;
class Metrics;
class MetricsHttpServer;
class StatsCollector;
class SessionStreamService;
class RegionListener;
class RingListener;
class UnixListener;
struct DrainSummary;

class Daemon {
 public:
  // Builds the backend and the device loop, restores --restore's checkpoint (Note [Checkpoint
  // and restore], server/channel/device.h; a faulty one fails Start, restoring nothing that
  // serves), starts serving on the configured listeners, sets
  // health to SERVING, writes the ready file, starts the liveness monitor and tells systemd
  // READY=1 (when started as Type=notify). FAILED_PRECONDITION / INVALID_ARGUMENT /
  // UNAVAILABLE (a listener could not bind) with the reason.
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(const DaemonConfig& config);

  // Shuts down if not done yet.
  ~Daemon();

  // Blocks until SIGTERM or SIGINT. The caller must have blocked both signals in every thread
  // (BlockTerminationSignals) before Start, so that they are delivered here only.
  static int WaitForTerminationSignal();
  static void BlockTerminationSignals();

  // Tells systemd STOPPING=1 and stops the liveness monitor (no more WATCHDOG=1); new calls
  // answered UNAVAILABLE; health NOT_SERVING; queued work finishes; stop accepting
  // and let in-flight calls finish (up to 5 s, then cancel), closing idle connections as soon as
  // no call is left (Note [Idle connections at shutdown], daemon.cc);
  // stop the device loops, which closes every session and frees every page. Idempotent.
  // With --checkpoint_dir, every session is written there once queued work finished, before
  // anything is closed (unless a drain wrote one, or drained without a checkpoint).
  void Shutdown();

 private:
  Daemon() = default;

  // The steps of Start, in order. The device loops (backend chosen by the registry); the
  // services over them; the gRPC server with its listeners and authentication; the Prometheus
  // endpoint; the liveness monitor and systemd's READY=1.
  absl::Status StartDevices();
  // The backend ordinals to serve (Note [Device selection], config.h), --devices=all counted.
  absl::StatusOr<std::vector<uint32_t>> DeviceOrdinals() const;
  // Note [Lost devices] (daemon.cc): called once per device, from a backend thread.
  void OnDeviceLost(uint32_t index, const absl::Status& status);
  // The auth policy (--auth_config or the default), before the restore that needs its principals.
  absl::Status LoadPolicy();
  // --restore: verifies the checkpoint as a whole, then restores every session on its device.
  absl::Status RestoreSessions();
  void StartServices();
  absl::Status StartGrpc();
  // The region and ring sockets beside the Unix socket (warnings, not errors, when they fail).
  void StartLocalSockets();
  // --health_listen: grpc.health.v1 alone, plain text (Note [Health listener], daemon.cc).
  absl::Status StartHealthListener();
  absl::Status StartMetricsHttp();
  void StartLivenessAndNotify();

  // Note [Checkpoint and restore]. Freezes every device after its queued work, reads every
  // session and writes them to --checkpoint_dir; on failure thaws the devices (the caller
  // decides whether to serve on). Serialized by checkpoint_mu_.
  absl::StatusOr<DrainSummary> WriteCheckpointLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(checkpoint_mu_);
  // The Drain RPC (compute_service.h's DrainHandler): on a thread of its own, stops taking calls,
  // writes the checkpoint when asked, answers `done`, and then raises SIGTERM, so that main runs
  // Shutdown. A checkpoint that fails is answered with its error and the daemon serves on.
  void OnDrain(bool checkpoint, absl::AnyInvocable<void(absl::StatusOr<DrainSummary>)> done);
  void Drain(bool checkpoint, absl::AnyInvocable<void(absl::StatusOr<DrainSummary>)> done);
  void CheckpointAtShutdown();

  DaemonConfig config_;
  AuthPolicy policy_;  // Until StartGrpc gives it to auth_.
  absl::Mutex checkpoint_mu_;
  bool checkpoint_done_ ABSL_GUARDED_BY(checkpoint_mu_) = false;  // Written, or not wanted.
  absl::Mutex drain_mu_;
  bool stopping_ ABSL_GUARDED_BY(drain_mu_) = false;  // Shutdown began: no drain starts.
  std::thread drain_thread_ ABSL_GUARDED_BY(drain_mu_);
  absl::Mutex lost_mu_;
  std::vector<bool> lost_ ABSL_GUARDED_BY(lost_mu_);  // By device index (Note [Lost devices]).
  int tcp_port_ = 0;                                  // The bound TCP port; 0 without --tcp.
  std::string metrics_address_;  // HOST:PORT of --metrics_listen once serving; empty when off.
  // Before the loops: tasks the loops still run at their end may report to these.
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<StatsCollector> stats_;
  std::vector<std::unique_ptr<DeviceLoop>> loops_;
  // Before the services, which use them (docs/security.md).
  std::unique_ptr<UnixListener> unix_listener_;  // Null without --listen.
  std::unique_ptr<Authenticator> auth_;
  // The region socket beside the Unix socket; null without --listen or with --max_region_bytes=0.
  std::unique_ptr<RegionListener> region_listener_;
  std::unique_ptr<CallCounter> calls_;  // Outlives server_, whose interceptor counts.
  std::unique_ptr<ComputeService> compute_;
  std::unique_ptr<HealthService> health_;
  std::unique_ptr<SessionStreamService> streams_;
  // The ring socket beside the Unix socket; null without --listen or with --command_ring=false.
  // After streams_, which its rings attach to.
  std::unique_ptr<RingListener> ring_listener_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::Server> health_server_;  // --health_listen; null when off.
  int health_port_ = 0;                          // Its bound port; 0 when off.
  std::unique_ptr<LivenessMonitor> liveness_;
  std::unique_ptr<MetricsHttpServer> metrics_http_;  // --metrics_listen; null when off.
  bool shut_down_ = false;
};

}  // namespace cubed
