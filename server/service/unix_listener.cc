#include "server/service/unix_listener.h"

#include <fcntl.h>
#include <grpcpp/server.h>
#include <grpcpp/server_posix.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "spdlog/spdlog.h"

namespace cubed {

absl::StatusOr<std::unique_ptr<UnixListener>> UnixListener::Listen(const std::string& path,
                                                                   const std::string& group) {
  std::unique_ptr<UnixListener> l(new UnixListener());
  absl::StatusOr<int> fd = ListenUnixSocket(path, group, SOCK_STREAM, "--listen");
  if (!fd.ok()) return fd.status();
  l->listen_fd_ = *fd;
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
  Acceptor acceptor(listen_fd_, "unix listener");  // Note [Descriptor exhaustion].
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_[0], POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("unix listener: poll: {}", std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    const int fd = acceptor.Accept();
    if (fd < 0) continue;
    absl::StatusOr<PeerCredentials> cred = PeerCredentialsOf(fd);
    if (!cred.ok()) {
      spdlog::warn("unix listener: {}; connection dropped", std::string(cred.status().message()));
      close(fd);
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      peers_[fd] = *cred;
    }
    spdlog::debug("unix connection fd {} from pid {} uid {} gid {}", fd, cred->pid, cred->uid,
                  cred->gid);
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
