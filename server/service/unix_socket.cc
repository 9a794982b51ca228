#include "server/service/unix_socket.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"

namespace cubed {
namespace {

absl::StatusOr<gid_t> GroupId(const std::string& group) {
  uint32_t number = 0;
  if (absl::SimpleAtoi(group, &number)) return static_cast<gid_t>(number);
  struct group* g = getgrnam(group.c_str());
  if (g == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("--listen_group: no group named '", group, "'"));
  }
  return g->gr_gid;
}

}  // namespace

absl::StatusOr<int> ListenUnixSocket(const std::string& path, const std::string& group, int type,
                                     const char* flag) {
  std::optional<gid_t> gid;
  if (!group.empty()) {
    absl::StatusOr<gid_t> g = GroupId(group);
    if (!g.ok()) return g.status();
    gid = *g;
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": '", path, "' is too long"));
  }
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  const int fd = socket(AF_UNIX, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat(flag, ": socket: ", std::strerror(errno)));
  absl::Cleanup close_fd = [fd] { close(fd); };
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return absl::UnavailableError(absl::StrCat(flag, ": bind ", path, ": ", std::strerror(errno)));
  }
  // Mode and group before listen(): until then nobody can connect.
  if (chmod(path.c_str(), 0660) != 0) {
    return absl::UnavailableError(absl::StrCat(flag, ": chmod ", path, ": ", std::strerror(errno)));
  }
  if (gid.has_value() && chown(path.c_str(), static_cast<uid_t>(-1), *gid) != 0) {
    return absl::UnavailableError(absl::StrCat("--listen_group: chown ", path, " to group ", group,
                                               ": ", std::strerror(errno)));
  }
  if (listen(fd, 128) != 0) {
    return absl::UnavailableError(
        absl::StrCat(flag, ": listen ", path, ": ", std::strerror(errno)));
  }
  std::move(close_fd).Cancel();
  return fd;
}

absl::StatusOr<PeerCredentials> PeerCredentialsOf(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return absl::UnavailableError(absl::StrCat("SO_PEERCRED: ", std::strerror(errno)));
  }
  return PeerCredentials{cred.pid, cred.uid, cred.gid};
}

// Note [Descriptor exhaustion]
// accept() fails with EMFILE (or ENFILE) when the process (or the system) has no descriptor left,
// and the connection stays in the backlog: a listener that retries spins or sleeps while the
// client waits forever. The Acceptor holds one descriptor in reserve; when accept fails so, it
// gives the reserve back, accepts the connection with it, closes it at once (the client sees its
// connection end: refused, not hung), and takes the reserve again. New connections are refused
// while the descriptors are used up and the open ones keep being served; a warning is logged at
// most once a second.
//
// Connections may not take the last kDescriptorHeadroom descriptors either: what the daemon
// opens for itself (gRPC's wake-up descriptors and the endpoint it builds around each
// connection, ring eventfds, region and cache files) must not be the call that fails, because
// gRPC's paths for that failure are not safe (at the limit, its teardown of a half-set-up server
// channel released a freed shared_ptr: the sanitizer build's vptr report, issue 15). accept()
// returns the lowest free descriptor, so one numbered within the headroom of RLIMIT_NOFILE means
// fewer than that many are left: it is shed like a connection accept could not take.
Acceptor::Acceptor(int listen_fd, const char* what)
    : listen_fd_(listen_fd), what_(what), spare_(open("/dev/null", O_RDONLY | O_CLOEXEC)) {}

Acceptor::~Acceptor() {
  if (spare_ >= 0) close(spare_);
}

int Acceptor::Accept() {
  const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  const int error = errno;
  if (fd >= 0) {
    rlimit limit{};
    if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY ||
        static_cast<rlim_t>(fd) + kDescriptorHeadroom < limit.rlim_cur) {
      return fd;
    }
    close(fd);  // Within the headroom: shed (the reserve is not needed to accept it).
    ++shed_;
    Warn("too few file descriptors left");
    return -1;
  }
  if (error != EMFILE && error != ENFILE) {
    if (error != EAGAIN && error != EINTR && error != ECONNABORTED) {
      spdlog::warn("{}: accept: {}", what_, std::strerror(error));
    }
    return -1;
  }
  if (spare_ >= 0) {
    close(spare_);
    const int shed = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (shed >= 0) {
      close(shed);
      ++shed_;
    }
    spare_ = open("/dev/null", O_RDONLY | O_CLOEXEC);  // -1 if another thread took the slot.
  }
  Warn(std::strerror(error));
  return -1;
}

void Acceptor::Warn(const char* why) {
  const int64_t now = absl::GetCurrentTimeNanos();
  if (now - last_warning_ns_ < 1'000'000'000) return;
  last_warning_ns_ = now;
  spdlog::warn("{}: out of file descriptors ({}): refusing new connections ({} so far)", what_, why,
               shed_);
}

}  // namespace cubed
