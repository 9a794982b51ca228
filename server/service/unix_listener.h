#pragma once

// UnixListener: the daemon's Unix socket. It accepts connections itself, reads each peer's
// credentials from the kernel (SO_PEERCRED) and hands the connection to gRPC.
//
// Note [Unix peer credentials]: gRPC 1.51's C++ API exposes neither the connection's fd nor the
// peer's uid for a Unix socket it listens on itself (the insecure credentials' auth context
// carries only the security level, and peer() is "unix:" for an unnamed client socket). So the
// daemon owns the listening socket: an accept thread takes each connection, reads SO_PEERCRED
// (uid, gid, pid: set by the kernel at connect, not forgeable by the client), records it under
// the fd number and passes the fd to grpc::AddInsecureChannelFromFd. gRPC then names the call's
// peer "fd:N" with that number, and the Authenticator looks the credentials up by it. The fd
// number cannot be reused for another connection while a call on it runs: each call holds a
// reference on its transport, which owns the fd and closes it only when destroyed.

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/service/unix_socket.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace cubed {

// Thread-safe. Stop before the gRPC server shuts down.
class UnixListener {
 public:
  // Binds and listens on `path` (a stale socket must already be gone), mode 0660; when `group`
  // is not empty the socket's group becomes that group (by name or number). INVALID_ARGUMENT
  // for an unknown group, UNAVAILABLE when bind/listen fail, with errno's text.
  static absl::StatusOr<std::unique_ptr<UnixListener>> Listen(const std::string& path,
                                                              const std::string& group);
  ~UnixListener();

  // Starts the accept thread; every connection goes to `server`, which must outlive Stop.
  void Start(grpc::Server* server);
  // Stops accepting and closes the listening socket (connections already handed over stay).
  // Idempotent.
  void Stop();

  // The credentials of the connection gRPC calls `peer` ("fd:N"); nullopt when `peer` is not a
  // connection of this listener.
  std::optional<PeerCredentials> Lookup(absl::string_view peer) const;

 private:
  UnixListener() = default;
  void AcceptLoop(grpc::Server* server);

  int listen_fd_ = -1;
  int wake_fd_[2] = {-1, -1};  // Pipe; a byte written wakes the accept thread to stop.
  std::thread thread_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int, PeerCredentials> peers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cubed
