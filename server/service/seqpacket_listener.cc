#include "server/service/seqpacket_listener.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace cubed {

absl::StatusOr<std::unique_ptr<SeqpacketListener>> SeqpacketListener::Listen(
    const std::string& path, const std::string& group, const char* what) {
  std::unique_ptr<SeqpacketListener> l(new SeqpacketListener());
  l->what_ = what;
  absl::StatusOr<int> fd = ListenUnixSocket(path, group, SOCK_SEQPACKET, what);
  if (!fd.ok()) return fd.status();
  l->fd_ = *fd;
  l->acceptor_ = std::make_unique<Acceptor>(l->fd_, what);  // Note [Descriptor exhaustion].
  if (pipe2(l->wake_, O_CLOEXEC) != 0) {
    return absl::UnavailableError(absl::StrCat(what, ": pipe: ", std::strerror(errno)));
  }
  return l;
}

SeqpacketListener::~SeqpacketListener() {
  for (int fd : {fd_, wake_[0], wake_[1]}) {
    if (fd >= 0) close(fd);
  }
}

void SeqpacketListener::Wake() {
  const char byte = 1;
  while (write(wake_[1], &byte, 1) < 0 && errno == EINTR) {
  }
}

std::optional<SeqpacketPeer> SeqpacketListener::Accept(size_t open, size_t max_open,
                                                       const Authenticator& auth) {
  const int fd = acceptor_->Accept();
  if (fd < 0) return std::nullopt;
  if (open >= max_open) {
    spdlog::warn("{}: {} connections open, the most allowed; refused one", what_, open);
    close(fd);
    return std::nullopt;
  }
  absl::StatusOr<PeerCredentials> peer = PeerCredentialsOf(fd);
  if (!peer.ok()) {
    spdlog::warn("{}: {}; connection dropped", what_, std::string(peer.status().message()));
    close(fd);
    return std::nullopt;
  }
  return SeqpacketPeer{fd, *peer, auth.IdentifyUnixPeer(*peer)};
}

}  // namespace cubed
