#pragma once

// Metrics: the daemon's counters and latency histograms, updated from gRPC threads, loop threads
// and backend completion threads. GetStats (compute.proto) and the Prometheus endpoint
// (metrics_http.h) report them, together with gauges read on the device loops (device_stats.h).
//
// Note [Metrics hot path]: recording takes no lock. Every series is a fixed array of relaxed
// atomics indexed by method (or stream command kind), status code and latency bucket, so two
// threads recording the same series only contend on a cache line. A snapshot reads the atomics
// one by one: it is not an instant of the whole registry, but every counter in it is exact for
// some moment during the snapshot and never goes back.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/auth/rpc.h"
#include "server/metrics/stats_snapshot.h"

namespace cubed {

// Upper bounds of the latency buckets, microseconds (a final +Inf bucket is implicit).
inline constexpr uint64_t kLatencyBoundsUs[] = {
    10,    25,    50,     100,    250,    500,     1000,    2500,    5000,    10000,
    25000, 50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000};
inline constexpr size_t kNumLatencyBounds = sizeof(kLatencyBoundsUs) / sizeof(kLatencyBoundsUs[0]);

// A latency histogram with the fixed buckets above. Thread-safe, lock-free.
class LatencyHistogram {
 public:
  // Records one observation; negative durations count as 0.
  void Observe(absl::Duration latency);
  // Cumulative buckets, count and sum.
  HistogramSnapshot Snapshot() const;

 private:
  std::atomic<uint64_t> buckets_[kNumLatencyBounds + 1] = {};  // Not cumulative; last is +Inf.
  std::atomic<uint64_t> sum_us_{0};
};

// Finished calls by gRPC status code. Thread-safe, lock-free.
class CodeCounters {
 public:
  void Count(absl::StatusCode code);
  // One CodeCount per code seen, in code order.
  std::vector<CodeCount> Snapshot() const;

 private:
  static constexpr int kNumCodes = 17;  // OK .. UNAUTHENTICATED; others count as UNKNOWN.
  std::atomic<uint64_t> counts_[kNumCodes] = {};
};

struct MethodMetrics {
  CodeCounters codes;
  LatencyHistogram queue;      // Arrival to the loop starting the call.
  LatencyHistogram execution;  // Loop start to completion.
  std::atomic<uint64_t> bytes_received{0};
  std::atomic<uint64_t> bytes_sent{0};
};

struct StreamCommandMetrics {
  CodeCounters codes;
  LatencyHistogram queue;
  LatencyHistogram execution;
};

// The registry. Thread-safe (Note [Metrics hot path]). Owned by the daemon; outlives the services.
class Metrics {
 public:
  // Most stream command kinds (StreamCommand::Kind values); larger kinds share the last slot.
  static constexpr int kMaxStreamKinds = 32;

  Metrics();

  MethodMetrics& method(Method m) { return methods_[static_cast<int>(m)]; }
  // `kind` is a StreamCommand::Kind value.
  StreamCommandMetrics& stream_command(int kind);

  // Fills latency_bounds_us, methods (every method), stream_commands (every kind
  // server/channel/stream_command.h names) and uptime_us; leaves devices and open_streams alone.
  void Snapshot(StatsSnapshot* out) const;

 private:
  const absl::Time start_;
  MethodMetrics methods_[static_cast<int>(Method::kCount)];
  StreamCommandMetrics stream_commands_[kMaxStreamKinds];
};

}  // namespace cubed
