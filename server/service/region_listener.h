#pragma once

// RegionListener: the region socket (proto/cubed/v1/region.proto), through which a client on
// the daemon's host registers shared memory for one of its sessions by passing a sealed memfd
// (SCM_RIGHTS). Note [Shared-memory regions] (server/channel/shared_region.h) gives the trust
// model; docs/api.md the protocol.
//
// One thread serves every connection with poll(2): it accepts, reads each peer's credentials
// (SO_PEERCRED) once at accept, receives each request with its descriptor, maps the memory
// (SharedRegion::Map) and hands it to the session's device loop, then answers. Connections are
// non-blocking: a client that sends half a request or stops reading stalls only itself (its
// connection is closed when an answer cannot be written at once). The registration itself waits
// for the device loop, like any call on that device.

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "server/channel/device_loop.h"
#include "server/service/authenticator.h"
#include "server/service/seqpacket_listener.h"

namespace cubed {

// Where the region socket of a daemon listening on the Unix socket `unix_socket` is.
inline std::string RegionSocketPath(const std::string& unix_socket) {
  return unix_socket + ".regions";
}

struct RegionListenerOptions {
  uint64_t max_region_bytes = uint64_t{16} << 30;  // Largest region one registration may map.
  size_t max_connections = 1024;                   // Past that, new connections are refused.
};

// Thread-safe. `auth` and the loops must outlive it; Stop it before the loops stop.
class RegionListener {
 public:
  // Binds and listens on `path` (SOCK_SEQPACKET; a stale socket must already be gone), mode 0660,
  // group `group` as UnixListener::Listen. INVALID_ARGUMENT for an unknown group, UNAVAILABLE
  // when socket/bind/listen fail, with errno's text.
  static absl::StatusOr<std::unique_ptr<RegionListener>> Listen(const std::string& path,
                                                                const std::string& group,
                                                                RegionListenerOptions options,
                                                                const Authenticator* auth,
                                                                std::vector<DeviceLoop*> loops);
  ~RegionListener();  // Stops.

  // Starts the serving thread.
  void Start();
  // Stops serving, closes the listening socket and every connection (regions already
  // registered stay with their sessions). Idempotent.
  void Stop();

 private:
  struct Connection;
  RegionListener() = default;
  void Serve();
  // Receives and answers one request; false when the connection is to be closed.
  bool Answer(Connection& connection);
  absl::StatusOr<std::pair<uint64_t, uint64_t>> Register(const Connection& connection,
                                                         uint64_t session, int fd);

  std::unique_ptr<SeqpacketListener> socket_;
  RegionListenerOptions options_;
  const Authenticator* auth_ = nullptr;
  std::vector<DeviceLoop*> loops_;
  std::thread thread_;
};

}  // namespace cubed
