#include "server/daemon/liveness_monitor.h"

#include <sys/stat.h>

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"
#include "server/channel/device_loop.h"
#include "spdlog/spdlog.h"

namespace cubed {

// Note [Loop liveness]: every period the monitor looks at each loop's ping: answered (the loop
// ran it) or still queued since `posted`. If every ping was answered it sends WATCHDOG=1 (at
// most every watchdog/4) and posts fresh pings. A ping unanswered for stall_timeout marks the
// loop stalled: health says NOT_SERVING until it answers. A loop busy with one long task counts
// as unanswering too: WatchdogSec= must exceed the longest single task (docs/operations.md).
struct LivenessMonitor::Probe {
  absl::Mutex mu;
  bool in_flight ABSL_GUARDED_BY(mu) = false;
  absl::Time posted ABSL_GUARDED_BY(mu);
};

namespace {

bool FileExists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

}  // namespace

LivenessMonitor::LivenessMonitor(std::vector<DeviceLoop*> loops, LivenessOptions options,
                                 SystemdNotifier notifier,
                                 absl::AnyInvocable<void(bool)> on_responsive_change)
    : loops_(std::move(loops)),
      options_(std::move(options)),
      notifier_(std::move(notifier)),
      on_change_(std::move(on_responsive_change)) {
  period_ = std::min(absl::Seconds(1), options_.stall_timeout / 2);
  if (notifier_.watchdog_interval().has_value()) {
    period_ = std::min(period_, *notifier_.watchdog_interval() / 2);
  }
  period_ = std::max(period_, absl::Milliseconds(1));
  for (size_t i = 0; i < loops_.size(); ++i) probes_.push_back(std::make_shared<Probe>());
  if (!options_.wedge_file.empty()) {
    spdlog::warn(
        "TEST ONLY: CUBED_TEST_WEDGE_FILE={} is set: the device loops hang while it exists",
        options_.wedge_file);
  }
  thread_ = std::thread([this] { Run(); });
}

LivenessMonitor::~LivenessMonitor() { Stop(); }

void LivenessMonitor::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void LivenessMonitor::Run() {
  const std::optional<absl::Duration> watchdog = notifier_.watchdog_interval();
  absl::Time last_watchdog = absl::InfinitePast();
  bool responsive = true;
  std::vector<bool> stalled(loops_.size(), false);
  for (;;) {
    const absl::Time now = absl::Now();
    bool all_answered = true;
    bool any_stalled = false;
    for (size_t i = 0; i < loops_.size(); ++i) {
      Probe& probe = *probes_[i];
      absl::MutexLock lock(&probe.mu);
      if (probe.in_flight) {
        all_answered = false;
        const bool is_stalled = now - probe.posted >= options_.stall_timeout;
        if (is_stalled && !stalled[i]) {
          spdlog::error("device loop {} has not run a task for {}: health NOT_SERVING", i,
                        absl::FormatDuration(now - probe.posted));
        }
        stalled[i] = is_stalled;
        any_stalled |= is_stalled;
        continue;
      }
      if (stalled[i]) spdlog::warn("device loop {} runs tasks again", i);
      stalled[i] = false;
      probe.in_flight = true;
      probe.posted = now;
      std::shared_ptr<Probe> shared = probes_[i];
      const std::string wedge = options_.wedge_file;
      // False once the loop stops (the daemon shuts down): the ping stays in flight.
      loops_[i]->Post([shared, wedge](Device&) {
        while (!wedge.empty() && FileExists(wedge)) absl::SleepFor(absl::Milliseconds(5));
        absl::MutexLock lock(&shared->mu);
        shared->in_flight = false;
      });
    }
    if (all_answered && watchdog.has_value() && now - last_watchdog >= *watchdog / 4) {
      if (absl::Status s = notifier_.Notify("WATCHDOG=1"); !s.ok()) {
        spdlog::warn("systemd watchdog: {}", std::string(s.message()));
      }
      last_watchdog = now;
    }
    if (responsive == any_stalled) {
      responsive = !any_stalled;
      on_change_(responsive);
    }
    absl::MutexLock lock(&mu_);
    auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
    if (mu_.AwaitWithTimeout(absl::Condition(&stopping), period_)) return;
  }
}

}  // namespace cubed
