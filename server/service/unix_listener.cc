#include "server/service/unix_listener.h"

#include <fcntl.h>
#include <grp.h>
#include <grpcpp/server.h>
#include <grpcpp/server_posix.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
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

absl::StatusOr<std::unique_ptr<UnixListener>> UnixListener::Listen(const std::string& path,
                                                                   const std::string& group) {
  std::unique_ptr<UnixListener> l(new UnixListener());
  std::optional<gid_t> gid;
  if (!group.empty()) {
    absl::StatusOr<gid_t> g = GroupId(group);
    if (!g.ok()) return g.status();
    gid = *g;
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("--listen: '", path, "' is too long"));
  }
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  l->listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (l->listen_fd_ < 0) {
    return absl::UnavailableError(absl::StrCat("--listen: socket: ", std::strerror(errno)));
  }
  if (bind(l->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return absl::UnavailableError(
        absl::StrCat("--listen: bind ", path, ": ", std::strerror(errno)));
  }
  // Mode and group before listen(): until then nobody can connect.
  if (chmod(path.c_str(), 0660) != 0) {
    return absl::UnavailableError(
        absl::StrCat("--listen: chmod ", path, ": ", std::strerror(errno)));
  }
  if (gid.has_value() && chown(path.c_str(), static_cast<uid_t>(-1), *gid) != 0) {
    return absl::UnavailableError(absl::StrCat("--listen_group: chown ", path, " to group ", group,
                                               ": ", std::strerror(errno)));
  }
  if (listen(l->listen_fd_, 128) != 0) {
    return absl::UnavailableError(
        absl::StrCat("--listen: listen ", path, ": ", std::strerror(errno)));
  }
  if (pipe2(l->wake_fd_, O_CLOEXEC) != 0) {
    return absl::UnavailableError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  return l;
}

UnixListener::~UnixListener() {
  Stop();
  for (int fd : {listen_fd_, wake_fd_[0], wake_fd_[1]}) {
    if (fd >= 0) close(fd);
  }
}

void UnixListener::Start(grpc::Server* server) {
  thread_ = std::thread([this, server] { AcceptLoop(server); });
}

void UnixListener::Stop() {
  if (!thread_.joinable()) return;
  const char byte = 1;
  while (write(wake_fd_[1], &byte, 1) < 0 && errno == EINTR) {
  }
  thread_.join();
  close(listen_fd_);
  listen_fd_ = -1;
}

void UnixListener::AcceptLoop(grpc::Server* server) {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_[0], POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("unix listener: poll: {}", std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
        spdlog::warn("unix listener: accept: {}", std::strerror(errno));
        if (errno == EMFILE || errno == ENFILE) poll(nullptr, 0, 100);  // Let fds free up.
      }
      continue;
    }
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      spdlog::warn("unix listener: SO_PEERCRED: {}; connection dropped", std::strerror(errno));
      close(fd);
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      peers_[fd] = PeerCredentials{cred.pid, cred.uid, cred.gid};
    }
    spdlog::debug("unix connection fd {} from pid {} uid {} gid {}", fd, cred.pid, cred.uid,
                  cred.gid);
    grpc::AddInsecureChannelFromFd(server, fd);  // Takes ownership of fd.
  }
}

std::optional<PeerCredentials> UnixListener::Lookup(absl::string_view peer) const {
  int fd = -1;
  if (!absl::ConsumePrefix(&peer, "fd:") || !absl::SimpleAtoi(peer, &fd)) return std::nullopt;
  absl::MutexLock lock(&mu_);
  auto it = peers_.find(fd);
  if (it == peers_.end()) return std::nullopt;
  return it->second;
}

}  // namespace cubed
