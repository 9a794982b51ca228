#pragma once

// SystemdNotifier: the sd_notify(3) protocol, written out (it is one datagram): tells the service
// manager that the daemon is ready (READY=1), stopping (STOPPING=1), alive (WATCHDOG=1), and what
// it is doing (STATUS=...). Without $NOTIFY_SOCKET (not started by systemd as Type=notify) every
// message is dropped silently, so callers never need to ask.

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace cubed {

// Thread-safe (each Notify is one sendto on a socket created for it); copyable.
class SystemdNotifier {
 public:
  // Reads $NOTIFY_SOCKET, $WATCHDOG_USEC and $WATCHDOG_PID of this process.
  static SystemdNotifier FromEnvironment();
  // For tests: explicit values instead of the environment. `notify_socket` is a path, or
  // "@name" for an abstract socket; empty = disabled.
  SystemdNotifier(std::string notify_socket, std::optional<absl::Duration> watchdog)
      : socket_(std::move(notify_socket)), watchdog_(watchdog) {}

  // Whether a service manager listens (NOTIFY_SOCKET was set).
  bool enabled() const { return !socket_.empty(); }

  // The interval after which the manager kills a daemon that sent no WATCHDOG=1
  // ($WATCHDOG_USEC), when the watchdog is on and meant for this process ($WATCHDOG_PID absent or
  // equal to getpid()); nullopt otherwise.
  std::optional<absl::Duration> watchdog_interval() const { return watchdog_; }

  // Sends `state` (newline-separated KEY=VALUE lines, e.g. "READY=1\nSTATUS=serving") in one
  // datagram. OK without a notify socket. FAILED_PRECONDITION with the reason when the socket
  // address is malformed or the send fails (callers log it; the daemon keeps serving).
  absl::Status Notify(absl::string_view state) const;

 private:
  std::string socket_;
  std::optional<absl::Duration> watchdog_;
};

// Parses WATCHDOG_USEC / WATCHDOG_PID as sd_watchdog_enabled(3) does: the interval when `usec`
// is a positive integer and `pid` is null/empty or equals `self_pid`; nullopt otherwise.
std::optional<absl::Duration> ParseWatchdogInterval(const char* usec, const char* pid,
                                                    long self_pid);

}  // namespace cubed
