#pragma once

// P9: four concurrent clients. Each client is a cubed::Client on the session stream (the SDK's
// default transport) with its own session, issuing pipelined tiny Execute commands (`fill` of one
// f32, like P2) for a fixed window and then Sync. One client alone and then all of them at once,
// alternating, after a warm-up window of each. Measured twice: clients as separate worker
// processes (this program re-executed with --p9_worker; each has its own gRPC channel and
// connection) and as threads of this process (separate Client objects, but gRPC's global
// subchannel pool gives their channels one shared connection).

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/bench/cpu/bench_report.h"

namespace cubed::cpubench {

struct ConcurrentOptions {
  int clients = 4;
  int repetitions = 7;  // Timed windows of each kind (solo, concurrent), after one warm-up each.
  absl::Duration window = absl::Milliseconds(500);  // Each client issues commands this long.
  int warmup_commands = 2000;                       // Per client before its first window.
  std::string self;     // This program, re-executed for the worker processes.
  bool threads = true;  // Also measure clients as threads of this process (rows "P9t").
};

// The options from the --p9_* flags (self: /proc/self/exe).
ConcurrentOptions ConcurrentOptionsFromFlags();

// Rows P9 (worker processes) and, with options.threads, P9t (threads of this process): aggregate
// commands/s of all clients together vs one client alone, and the slowest client's rate vs the
// fastest's in the same windows. `daemon_pid` is read from /proc for the CPU-time notes. Blocks;
// errors of any client (or worker) come back as its status.
absl::StatusOr<std::vector<Row>> MeasureConcurrentClients(const std::string& daemon_address,
                                                          pid_t daemon_pid,
                                                          const ConcurrentOptions& options);

// True when this process was started as a P9 worker (--p9_worker=ADDRESS).
bool IsConcurrentWorker();

// The worker's main: connects, warms up, writes "ready", then answers each "go" line on stdin
// with one window ("<t0_ns> <t1_ns> <commands> <run_ns> <wait_ns>", the last two summed over its
// threads' schedstat) on stdout until stdin closes. Returns
// the exit code; errors are written as "error <message>".
int RunConcurrentWorker();

}  // namespace cubed::cpubench
