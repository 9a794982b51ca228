#include "server/daemon/systemd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cubed {

std::optional<absl::Duration> ParseWatchdogInterval(const char* usec, const char* pid,
                                                    long self_pid) {
  uint64_t micros = 0;
  if (usec == nullptr || !absl::SimpleAtoi(usec, &micros) || micros == 0) return std::nullopt;
  if (pid != nullptr && pid[0] != '\0') {
    int64_t target = 0;
    if (!absl::SimpleAtoi(pid, &target) || target != self_pid) return std::nullopt;
  }
  return absl::Microseconds(static_cast<int64_t>(micros));
}

SystemdNotifier SystemdNotifier::FromEnvironment() {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  return SystemdNotifier(
      socket == nullptr ? "" : socket,
      ParseWatchdogInterval(std::getenv("WATCHDOG_USEC"), std::getenv("WATCHDOG_PID"), getpid()));
}

absl::Status SystemdNotifier::Notify(absl::string_view state) const {
  if (socket_.empty()) return absl::OkStatus();
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  // A path, or "@name": the abstract namespace, whose address starts with a NUL byte and is not
  // NUL-terminated (its length is part of the name).
  const bool abstract = socket_[0] == '@';
  if ((socket_[0] != '/' && !abstract) || socket_.size() >= sizeof(addr.sun_path)) {
    return absl::FailedPreconditionError(
        absl::StrCat("NOTIFY_SOCKET='", socket_, "' is not an absolute path or @name that fits in ",
                     sizeof(addr.sun_path) - 1, " bytes"));
  }
  std::memcpy(addr.sun_path, socket_.data(), socket_.size());
  if (abstract) addr.sun_path[0] = '\0';
  const socklen_t length =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + socket_.size() + (abstract ? 0 : 1));
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat("notify socket: ", std::strerror(errno)));
  }
  ssize_t sent;
  do {
    sent = sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
                  reinterpret_cast<const sockaddr*>(&addr), length);
  } while (sent < 0 && errno == EINTR);
  const int error = errno;
  close(fd);
  if (sent < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("sending to NOTIFY_SOCKET=", socket_, ": ", std::strerror(error)));
  }
  return absl::OkStatus();
}

}  // namespace cubed
