#pragma once

// StatsCollector: the daemon's statistics as one StatsSnapshot (stats_snapshot.h): the counters
// and histograms of the Metrics registry plus each device's gauges (memory, sessions, handles,
// kernel cache), which are read by a task on that device's loop, the only thread that may touch
// the Device. GetStats and the Prometheus endpoint (metrics_text.h) both report what this builds.

#include <cstddef>
#include <functional>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/channel/device_loop.h"
#include "server/metrics/metrics.h"
#include "server/metrics/stats_snapshot.h"

namespace cubed {

// Thread-safe. The loops, the registry and whatever `streams` reads must outlive every
// collection in flight (the daemon stops its loops, which runs their queued tasks, first).
class StatsCollector {
 public:
  using Done = absl::AnyInvocable<void(absl::StatusOr<StatsSnapshot>)>;

  // `streams` counts the session streams and command rings now; may be empty (all 0).
  StatsCollector(std::vector<DeviceLoop*> loops, const Metrics* metrics,
                 std::function<StreamCounts()> streams);

  // Posts one task per device loop and calls `done` once, on the last loop thread to answer
  // (or on the caller's thread), without blocking. UNAVAILABLE when a loop is shutting down.
  void Collect(Done done) const;

  // Collect, waiting at most `timeout`: for threads that may block (the HTTP server's).
  // DEADLINE_EXCEEDED when a device loop did not answer in time (it is busy with long work).
  absl::StatusOr<StatsSnapshot> CollectFor(absl::Duration timeout) const;

 private:
  std::vector<DeviceLoop*> loops_;
  const Metrics* metrics_;
  std::function<StreamCounts()> streams_;
};

}  // namespace cubed
