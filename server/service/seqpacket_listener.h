#pragma once

// SeqpacketListener: a listening SOCK_SEQPACKET Unix socket of the daemon (the region socket,
// RegionListener; the ring socket, RingListener) with the wake pipe of the one thread that
// polls it, and the acceptance of a connection with its peer's kernel credentials.

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "server/auth/principal.h"
#include "server/service/authenticator.h"
#include "server/service/unix_socket.h"

namespace cubed {

// One accepted connection: its non-blocking descriptor (the caller owns it), credentials and
// principal (an error when the peer is unknown: each of its requests is refused with it).
struct SeqpacketPeer {
  int fd = -1;
  PeerCredentials peer;
  absl::StatusOr<PrincipalPtr> principal;
};

// Thread-safe: Wake from any thread, the rest from the polling thread.
class SeqpacketListener {
 public:
  // Binds and listens on `path` as ListenUnixSocket (mode 0660, group `group`); `what` names the
  // socket in errors and logs ("region socket"). Errors as ListenUnixSocket, or UNAVAILABLE when
  // the wake pipe cannot be made.
  static absl::StatusOr<std::unique_ptr<SeqpacketListener>> Listen(const std::string& path,
                                                                   const std::string& group,
                                                                   const char* what);
  ~SeqpacketListener();  // Closes the socket and the pipe.

  int fd() const { return fd_; }            // Poll it for POLLIN: a connection waits.
  int wake_fd() const { return wake_[0]; }  // Readable once Wake was called.
  void Wake();

  // Accepts the next connection and identifies its peer through `auth`; nullopt when there was
  // none, or it was dropped (logged): past `max_open` connections (`open` now), credentials that
  // cannot be read, or no descriptor left (shed: Note [Descriptor exhaustion] in unix_socket.cc).
  std::optional<SeqpacketPeer> Accept(size_t open, size_t max_open, const Authenticator& auth);

 private:
  SeqpacketListener() = default;
  int fd_ = -1;
  std::unique_ptr<Acceptor> acceptor_;  // Of fd_; used by Accept's caller only.
  int wake_[2] = {-1, -1};
  const char* what_ = "";
};

}  // namespace cubed
