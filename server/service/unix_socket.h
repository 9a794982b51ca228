#pragma once

// The daemon's listening Unix sockets (the gRPC socket, UnixListener; the region socket,
// RegionListener): binding with the mode and group that decide who may connect, and the
// kernel's word on who connected.

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace cubed {

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

// A non-blocking, close-on-exec socket of `type` (SOCK_STREAM, SOCK_SEQPACKET) bound to `path`
// (a stale socket must already be gone) and listening, mode 0660 and, when `group` is not empty,
// that group (by name or number), both set before listen() so that nobody connects earlier. The
// caller owns the descriptor. INVALID_ARGUMENT for an unknown group or a path too long,
// UNAVAILABLE when a call fails, with errno's text; `flag` names the option in messages.
absl::StatusOr<int> ListenUnixSocket(const std::string& path, const std::string& group, int type,
                                     const char* flag);

// The credentials the kernel recorded at connect (SO_PEERCRED: not forgeable by the client).
absl::StatusOr<PeerCredentials> PeerCredentialsOf(int fd);

// Accepts connections on one listening socket and sheds them while the process is out of file
// descriptors (Note [Descriptor exhaustion] in unix_socket.cc). Owned by the listener's accept
// thread; not thread-safe.
class Acceptor {
 public:
  // `what` names the socket in logs ("unix listener"); it must outlive the Acceptor.
  Acceptor(int listen_fd, const char* what);
  ~Acceptor();
  Acceptor(const Acceptor&) = delete;
  Acceptor& operator=(const Acceptor&) = delete;

  // The next connection (non-blocking, close-on-exec; the caller owns it), or -1 when there is
  // none now (EAGAIN), it went away, or it was shed for want of a descriptor (closed at once,
  // so the client sees its connection end instead of waiting in the backlog).
  int Accept();

  // Connections shed so far. For tests and logs.
  uint64_t shed() const { return shed_; }

  // Descriptors below RLIMIT_NOFILE that connections may not take (Note [Descriptor
  // exhaustion]).
  static constexpr int kDescriptorHeadroom = 32;

 private:
  // Logs that connections are refused, and `why`, at most once a second.
  void Warn(const char* why);

  int listen_fd_;
  const char* what_;
  int spare_ = -1;  // A descriptor held in reserve: /dev/null.
  uint64_t shed_ = 0;
  int64_t last_warning_ns_ = 0;
};

}  // namespace cubed
