#pragma once

// The daemon's listening Unix sockets (the gRPC socket, UnixListener; the region socket,
// RegionListener): binding with the mode and group that decide who may connect, and the
// kernel's word on who connected.

#include <sys/types.h>

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

}  // namespace cubed
