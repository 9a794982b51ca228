#include "common/fd_passing.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cubed {

absl::StatusOr<int> ConnectSeqpacket(const std::string& path, absl::string_view what) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " path '", path, "' is too long"));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  const int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (sock < 0) return absl::UnavailableError(absl::StrCat(what, ": socket: ", strerror(errno)));
  if (connect(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int error = errno;
    close(sock);
    return absl::UnavailableError(absl::StrCat(what, " ", path, ": ", strerror(error)));
  }
  return sock;
}

absl::Status SendWithDescriptors(int sock, absl::string_view bytes, absl::Span<const int> fds,
                                 absl::string_view what) {
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()));
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (!fds.empty()) {
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(cmsg), fds.data(), sizeof(int) * fds.size());
  }
  if (sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
    return absl::UnavailableError(absl::StrCat(what, ": sendmsg: ", strerror(errno)));
  }
  return absl::OkStatus();
}

ReceivedMessage::ReceivedMessage(ReceivedMessage&& other) noexcept
    : bytes(std::move(other.bytes)),
      truncated(other.truncated),
      fds_truncated(other.fds_truncated),
      closed(other.closed),
      fds_(std::exchange(other.fds_, {})) {}

ReceivedMessage::~ReceivedMessage() {
  for (int fd : fds_) {
    if (fd >= 0) close(fd);
  }
}

int ReceivedMessage::Take(size_t i) { return std::exchange(fds_[i], -1); }

absl::StatusOr<ReceivedMessage> ReceiveWithDescriptors(int sock, size_t max_bytes, size_t max_fds,
                                                       int flags) {
  ReceivedMessage m;
  m.bytes.resize(max_bytes);
  std::vector<char> control(CMSG_SPACE(sizeof(int) * max_fds));
  iovec iov{m.bytes.data(), m.bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  const ssize_t n = recvmsg(sock, &msg, flags | MSG_CMSG_CLOEXEC);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      m.bytes.clear();
      m.again = true;
      return m;
    }
    return absl::UnavailableError(absl::StrCat("recvmsg: ", strerror(errno)));
  }
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      m.fds_.push_back(fd);
    }
  }
  m.bytes.resize(static_cast<size_t>(n));
  m.truncated = (msg.msg_flags & MSG_TRUNC) != 0;
  m.fds_truncated = (msg.msg_flags & MSG_CTRUNC) != 0;
  m.closed = n == 0 && m.fds_.empty();
  return m;
}

}  // namespace cubed
