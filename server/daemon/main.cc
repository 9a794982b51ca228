// cubed: the compute daemon. Parses flags, builds the daemon, serves until SIGTERM or SIGINT.

#include <csignal>
#include <cstdio>
#include <optional>

#include "absl/flags/usage.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"
#include "server/daemon/config.h"
#include "server/daemon/daemon.h"
#include "spdlog/spdlog.h"

int main(int argc, char** argv) {
  // A write past RLIMIT_FSIZE (the kernel cache, the ready file, a log) fails with EFBIG and is
  // handled as an I/O error; the signal's default would kill the daemon and every session.
  signal(SIGXFSZ, SIG_IGN);
  absl::SetProgramUsageMessage(
      "an out-of-process compute server (CubeCL's ComputeServer over gRPC).\n"
      "  cubed [--listen=PATH|unix:PATH] [--tcp=HOST:PORT] [--backend=auto|cpu|cuda] "
      "[--flagfile=F]");
  if (std::optional<int> exit_code = cubed::ParseFlags(argc, argv)) return *exit_code;
  // Debian's Abseil tracks every Mutex acquisition in a lock-order graph (a debug aid that cost
  // ~1 % of the daemon's samples per command in the P2 profile, on every thread); the unit tests
  // of the locking code keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::StatusOr<cubed::DaemonConfig> config = cubed::ConfigFromFlags();
  if (!config.ok()) {
    std::fprintf(stderr, "cubed: %s\n", std::string(config.status().message()).c_str());
    return 2;
  }
  if (absl::Status s = cubed::SetLogLevel(config->log_level); !s.ok()) {
    std::fprintf(stderr, "cubed: --log_level: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  cubed::Daemon::BlockTerminationSignals();
  absl::StatusOr<std::unique_ptr<cubed::Daemon>> daemon = cubed::Daemon::Start(*config);
  if (!daemon.ok()) {
    spdlog::error("cannot start: {}", daemon.status().ToString());
    return 1;
  }
  const int signal = cubed::Daemon::WaitForTerminationSignal();
  spdlog::info("signal {} received", signal);
  (*daemon)->Shutdown();
  return 0;
}
