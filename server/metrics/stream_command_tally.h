#pragma once

// StreamCommandTally: a device loop's count of the stream commands it ran in one turn, added to
// the registry's series once per turn (Note [Stream command tally]).

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/metrics/metrics.h"

namespace cubed {

// Note [Stream command tally]
// Every stream command a loop runs is counted in its kind's series: a queue latency, an
// execution latency and a status code, five relaxed atomic adds and the bucket searches per
// command (with the clock read, ~18% of the CPU backend's loop per tiny execute). A loop runs a
// turn of up to 256 commands of one stream (Note [Stream turns]) and they are mostly of one
// kind, so it counts them in plain integers first and adds them to the registry once at the end
// of the turn, when a command of another kind comes, and before a command that answers (so a
// client that reads the stats after a sync's answer finds every command before the sync).
// Snapshots (GetStats, Prometheus) otherwise lag the loop by at most one turn (well under a
// millisecond of work); no count is lost.
class StreamCommandTally {
 public:
  StreamCommandTally() = default;
  StreamCommandTally(const StreamCommandTally&) = delete;
  StreamCommandTally& operator=(const StreamCommandTally&) = delete;
  ~StreamCommandTally() { Flush(); }

  // Counts one command of the series `metrics` (the registry's, for its kind; it outlives this
  // tally): its queue and execution latencies and status code. First adds what it holds to its
  // series when that is another one. One thread at a time (the stream's loop).
  void Observe(StreamCommandMetrics& metrics, absl::Duration queue, absl::Duration execution,
               absl::StatusCode code);

  // Adds what it holds to its series and empties itself; nothing when empty.
  void Flush();

 private:
  StreamCommandMetrics* metrics_ = nullptr;  // The series counted for; null when empty.
  uint64_t queue_[kNumLatencyBounds + 1] = {};
  uint64_t execution_[kNumLatencyBounds + 1] = {};
  uint64_t queue_sum_us_ = 0;
  uint64_t execution_sum_us_ = 0;
  uint64_t codes_[CodeCounters::kNumCodes] = {};
};

}  // namespace cubed
