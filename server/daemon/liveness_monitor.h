#pragma once

// LivenessMonitor: asks every device loop, over and over, whether it still runs tasks, by
// posting a no-op "ping" task to it. Its answers drive two things (Note [Loop liveness]):
// health (a loop that has not answered for `stall_timeout` makes the daemon NOT_SERVING until it
// answers again) and the systemd watchdog (WATCHDOG=1 is sent only when every loop answered its
// latest ping, so a wedged loop stops the pings and systemd restarts the daemon).

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/daemon/systemd_notify.h"

namespace cubed {

class DeviceLoop;

struct LivenessOptions {
  // A loop with a ping unanswered this long counts as stalled (health NOT_SERVING).
  absl::Duration stall_timeout = absl::Seconds(10);
  // TEST ONLY (CUBED_TEST_WEDGE_FILE, never a flag or RPC): while this file exists, every ping
  // blocks its loop thread, i.e. the loop is wedged. Empty = off.
  std::string wedge_file;
};

// Owns one thread. Construct after the loops run; Stop (or destroy) before they stop.
class LivenessMonitor {
 public:
  // `on_responsive_change(bool)` runs on the monitor thread each time "every loop answers"
  // changes (it starts true). WATCHDOG=1 goes to `notifier` when its watchdog is on.
  LivenessMonitor(std::vector<DeviceLoop*> loops, LivenessOptions options, SystemdNotifier notifier,
                  absl::AnyInvocable<void(bool)> on_responsive_change);
  ~LivenessMonitor();

  // Ends the thread: no more pings or health changes. Idempotent. Not from the callback.
  void Stop();

  // How often the monitor checks: min(1 s, stall_timeout / 2, watchdog / 2).
  absl::Duration period() const { return period_; }

 private:
  struct Probe;  // One loop's ping state, shared with the ping task in flight.
  void Run();

  std::vector<DeviceLoop*> loops_;
  std::vector<std::shared_ptr<Probe>> probes_;
  LivenessOptions options_;
  SystemdNotifier notifier_;
  absl::AnyInvocable<void(bool)> on_change_;
  absl::Duration period_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace cubed
