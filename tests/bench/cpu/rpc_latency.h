#pragma once

// P1: latency of a tiny unary call (cubed.v1.Compute/MemoryUsage) against a bare gRPC echo
// service in another process on the same transport, measured interleaved in one run.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/bench/cpu/bench_report.h"

namespace cubed::cpubench {

struct LatencyOptions {
  int rounds = 10;            // Rounds; each runs every path once, in a rotating order.
  int calls_per_round = 300;  // Sequential calls per path per round, each timed.
  int warmup_calls = 200;     // Untimed calls per path first.
};

// Three rows for one transport ("unix" or "tcp"): MemoryUsage through a raw generated sync stub,
// GetMemoryUsage through the SDK (cubed::Client), and (diagnostic, id "P1*") the echo answered
// from a second server thread, each against the echo baseline measured in the same rounds. Figures
// in microseconds: p50 and p99 over all calls; the bracket is the range of the per-round medians.
absl::StatusOr<std::vector<Row>> MeasureTinyUnary(const std::string& transport,
                                                  const std::string& daemon_address,
                                                  const std::string& echo_address,
                                                  const LatencyOptions& options);

}  // namespace cubed::cpubench
