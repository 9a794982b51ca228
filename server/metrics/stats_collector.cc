#include "server/metrics/stats_collector.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"

namespace cubed {
namespace {

// One device's gauges; runs on the device's loop thread.
DeviceGauges GaugesOf(const Device& d, size_t queued) {
  DeviceGauges g;
  g.device = d.index();
  g.up = d.Lost().ok();
  g.memory = d.Usage();
  g.imported = d.Imports();
  g.memory_limit = d.Description().memory_limit;
  g.sessions = d.session_count();
  g.handles = d.handle_count();
  g.regions = d.region_traffic();
  g.queued_tasks = queued;
  g.kernel_cache = d.KernelCache();
  g.launch_batches = d.LaunchBatches();
  const absl::Time now = absl::Now();
  d.ForEachSession([&](const Session& s) {
    SessionGauges& out = g.session_list.emplace_back();
    out.serial = s.memory_owner();
    if (s.owner() != nullptr) out.principal = s.owner()->name;
    out.handles = s.handles().size();
    out.bytes = s.bytes();
    out.kernels = s.kernels();
    out.graphs = s.graph_count();
    out.regions = s.regions().size();
    for (const auto& [id, entry] : s.handles()) {
      if (IsImportedSlice(entry.slice)) out.imported_bytes += entry.size;
    }
    out.age_us =
        static_cast<uint64_t>(std::max<int64_t>(0, absl::ToInt64Microseconds(now - s.opened())));
  });
  std::sort(g.session_list.begin(), g.session_list.end(),
            [](const SessionGauges& a, const SessionGauges& b) { return a.serial < b.serial; });
  return g;
}

// A collection in flight, shared by the loop tasks.
struct Gather {
  absl::Mutex mu;
  size_t remaining ABSL_GUARDED_BY(mu) = 0;
  std::vector<DeviceGauges> devices ABSL_GUARDED_BY(mu);
  absl::Status status ABSL_GUARDED_BY(mu);
  StatsCollector::Done done;
};

}  // namespace

StatsCollector::StatsCollector(std::vector<DeviceLoop*> loops, const Metrics* metrics,
                               std::function<StreamCounts()> streams)
    : loops_(std::move(loops)), metrics_(metrics), streams_(std::move(streams)) {}

void StatsCollector::Collect(Done done) const {
  auto gather = std::make_shared<Gather>();
  gather->done = std::move(done);
  {
    absl::MutexLock lock(&gather->mu);
    gather->remaining = loops_.size() + 1;  // +1: this call, until every task is posted.
    gather->devices.resize(loops_.size());
  }
  // Called once per loop and once by this call; the last one answers.
  auto arrive = [this, gather](size_t index, absl::StatusOr<DeviceGauges> stats) {
    {
      absl::MutexLock lock(&gather->mu);
      if (stats.ok()) {
        if (index < gather->devices.size()) gather->devices[index] = *std::move(stats);
      } else if (gather->status.ok()) {
        gather->status = stats.status();
      }
      if (--gather->remaining > 0) return;
    }
    absl::Status status;
    StatsSnapshot snapshot;
    {
      absl::MutexLock lock(&gather->mu);
      status = gather->status;
      snapshot.devices = std::move(gather->devices);
    }
    if (!status.ok()) {
      std::move(gather->done)(status);
      return;
    }
    metrics_->Snapshot(&snapshot);
    const StreamCounts streams = streams_ ? streams_() : StreamCounts();
    snapshot.open_streams = streams.open_streams;
    snapshot.open_rings = streams.open_rings;
    snapshot.rings_opened = streams.rings_opened;
    std::move(gather->done)(std::move(snapshot));
  };
  for (size_t i = 0; i < loops_.size(); ++i) {
    DeviceLoop* loop = loops_[i];
    const bool posted =
        loop->Post([arrive, i, loop](Device& d) { arrive(i, GaugesOf(d, loop->queued())); });
    if (!posted) arrive(i, absl::UnavailableError("the daemon is shutting down"));
  }
  arrive(loops_.size(), absl::StatusOr<DeviceGauges>(DeviceGauges()));
}

absl::StatusOr<StatsSnapshot> StatsCollector::CollectFor(absl::Duration timeout) const {
  struct Result {
    absl::Notification ready;
    absl::StatusOr<StatsSnapshot> stats;
  };
  auto result = std::make_shared<Result>();
  Collect([result](absl::StatusOr<StatsSnapshot> stats) {
    result->stats = std::move(stats);
    result->ready.Notify();
  });
  if (!result->ready.WaitForNotificationWithTimeout(timeout)) {
    return absl::DeadlineExceededError(absl::StrCat("a device loop did not answer within ",
                                                    absl::FormatDuration(timeout),
                                                    " (it is busy with long work); try again"));
  }
  return std::move(result->stats);
}

}  // namespace cubed
