#include "server/stats_collector.h"

#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace cubed {
namespace {

// One device's gauges; runs on the device's loop thread.
v1::DeviceStats DeviceStatsOf(const Device& d, size_t queued) {
  v1::DeviceStats s;
  s.set_device(d.index());
  const MemoryUsage usage = d.Usage();
  v1::MemoryUsage* m = s.mutable_memory();
  m->set_number_allocs(usage.number_allocs);
  m->set_bytes_in_use(usage.bytes_in_use);
  m->set_bytes_padding(usage.bytes_padding);
  m->set_bytes_reserved(usage.bytes_reserved);
  s.set_memory_limit(d.Description().memory_limit);
  s.set_sessions(d.session_count());
  s.set_handles(d.handle_count());
  s.set_queued_tasks(queued);
  const KernelCacheStats cache = d.KernelCache();
  v1::KernelCacheStats* k = s.mutable_kernel_cache();
  k->set_hits(cache.hits);
  k->set_misses(cache.misses);
  k->set_disk_hits(cache.disk_hits);
  k->set_compile_time_us(cache.compile_time_us);
  return s;
}

// A collection in flight, shared by the loop tasks.
struct Gather {
  absl::Mutex mu;
  size_t remaining ABSL_GUARDED_BY(mu) = 0;
  std::vector<v1::DeviceStats> devices ABSL_GUARDED_BY(mu);
  absl::Status status ABSL_GUARDED_BY(mu);
  StatsCollector::Done done;
};

}  // namespace

StatsCollector::StatsCollector(std::vector<DeviceLoop*> loops, const Metrics* metrics,
                               std::function<size_t()> open_streams)
    : loops_(std::move(loops)), metrics_(metrics), open_streams_(std::move(open_streams)) {}

void StatsCollector::Collect(Done done) const {
  auto gather = std::make_shared<Gather>();
  gather->done = std::move(done);
  {
    absl::MutexLock lock(&gather->mu);
    gather->remaining = loops_.size() + 1;  // +1: this call, until every task is posted.
    gather->devices.resize(loops_.size());
  }
  // Called once per loop and once by this call; the last one answers.
  auto arrive = [this, gather](size_t index, absl::StatusOr<v1::DeviceStats> stats) {
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
    v1::GetStatsResponse response;
    {
      absl::MutexLock lock(&gather->mu);
      status = gather->status;
      for (v1::DeviceStats& d : gather->devices) *response.add_devices() = std::move(d);
    }
    if (!status.ok()) {
      std::move(gather->done)(status);
      return;
    }
    metrics_->ToProto(&response);
    response.set_open_streams(open_streams_ ? open_streams_() : 0);
    std::move(gather->done)(std::move(response));
  };
  for (size_t i = 0; i < loops_.size(); ++i) {
    DeviceLoop* loop = loops_[i];
    const bool posted = loop->Post([arrive, i, loop](Device& d) {
      arrive(i, DeviceStatsOf(d, loop->queued()));
    });
    if (!posted) arrive(i, absl::UnavailableError("the daemon is shutting down"));
  }
  arrive(loops_.size(), absl::StatusOr<v1::DeviceStats>(v1::DeviceStats()));
}

absl::StatusOr<v1::GetStatsResponse> StatsCollector::CollectFor(absl::Duration timeout) const {
  struct Result {
    absl::Notification ready;
    absl::StatusOr<v1::GetStatsResponse> stats;
  };
  auto result = std::make_shared<Result>();
  Collect([result](absl::StatusOr<v1::GetStatsResponse> stats) {
    result->stats = std::move(stats);
    result->ready.Notify();
  });
  if (!result->ready.WaitForNotificationWithTimeout(timeout)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "a device loop did not answer within ", absl::FormatDuration(timeout),
        " (it is busy with long work); try again"));
  }
  return std::move(result->stats);
}

}  // namespace cubed
