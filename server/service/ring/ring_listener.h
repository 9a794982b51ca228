#pragma once

// RingListener: the ring socket (proto/cubed/v1/ring.proto), through which a client on the
// daemon's host opens a session stream over a command ring (Note [Command ring],
// common/shm_ring.h). One thread serves every connection with poll(2): it accepts, reads each
// peer's credentials (SO_PEERCRED) once at accept, receives the one OpenRingRequest with its
// memfd, maps and checks the ring, makes the three doorbells, attaches a RingWire to the session
// stream service and answers. Afterwards it watches the connection: when the client closes it (or
// dies), or sends anything more, the ring's stream ends CANCELLED; when the stream finished, the
// connection is closed and the ring unmapped. Connections are non-blocking: a client that sends
// half a request stalls only itself.

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/service/authenticator.h"
#include "server/service/seqpacket_listener.h"
#include "server/service/stream/session_stream.h"

namespace cubed {

// Where the ring socket of a daemon listening on the Unix socket `unix_socket` is.
inline std::string RingSocketPath(const std::string& unix_socket) { return unix_socket + ".ring"; }

struct RingListenerOptions {
  uint64_t max_ring_bytes = uint64_t{256} << 20;    // Largest ring file (header and both rings).
  uint64_t max_request_bytes = uint64_t{64} << 20;  // Largest SessionRequest in a ring.
  size_t max_rings = 256;                           // Open rings (a thread each); more are refused.
  absl::Duration spin = absl::ZeroDuration();       // Each ring thread's spin before it sleeps.
};

// Thread-safe. `auth` and `streams` must outlive it; Stop it after the streams drained and before
// the loops stop.
class RingListener {
 public:
  // Binds and listens on `path` (SOCK_SEQPACKET; a stale socket must already be gone), mode 0660,
  // group `group` as UnixListener::Listen. INVALID_ARGUMENT for an unknown group, UNAVAILABLE
  // when socket/bind/listen fail, with errno's text.
  static absl::StatusOr<std::unique_ptr<RingListener>> Listen(const std::string& path,
                                                              const std::string& group,
                                                              RingListenerOptions options,
                                                              const Authenticator* auth,
                                                              SessionStreamService* streams);
  ~RingListener();  // Stops.

  // Starts the serving thread.
  void Start();
  // Stops serving: closes the listening socket, stops every ring's thread and closes every
  // connection. Idempotent.
  void Stop();

  // Rings open now, and opened since Start (metrics). Thread-safe.
  size_t open_rings() const { return open_rings_.load(std::memory_order_relaxed); }
  uint64_t rings_opened() const { return rings_opened_.load(std::memory_order_relaxed); }

 private:
  struct Connection;
  RingListener() = default;
  void Serve();
  // Receives the request and opens the ring; false when the connection is to be closed.
  bool Open(Connection& connection);
  absl::Status OpenRing(Connection& connection, int memfd);

  std::unique_ptr<SeqpacketListener> socket_;
  RingListenerOptions options_;
  const Authenticator* auth_ = nullptr;
  SessionStreamService* streams_ = nullptr;
  std::atomic<size_t> open_rings_{0};
  std::atomic<uint64_t> rings_opened_{0};
  std::thread thread_;
};

}  // namespace cubed
