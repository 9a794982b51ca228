#pragma once

// Authenticator: finds the principal of a call at the gRPC edge (docs/security.md).
//  * Unix socket peers: by the uid, then the gid, the kernel reported at connect (SO_PEERCRED,
//    Note [Unix peer credentials] in unix_listener.h). No match: PERMISSION_DENIED.
//  * TCP peers: by the bearer token of the `authorization: Bearer TOKEN` metadata (compared in
//    constant time against every principal's token, never logged), else by the subject CN of a
//    verified client certificate (mTLS). No match: UNAUTHENTICATED.

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/auth/auth_policy.h"
#include "server/auth/principal.h"
#include "server/service/unix_listener.h"

namespace grpc {
class ServerContextBase;
}  // namespace grpc

namespace cubed {

// Immutable after construction; thread-safe. `unix_listener` (may be null) must outlive it.
class Authenticator {
 public:
  Authenticator(AuthPolicy policy, const UnixListener* unix_listener);

  // The principal `ctx`'s call comes from, or PERMISSION_DENIED / UNAUTHENTICATED as above.
  absl::StatusOr<PrincipalPtr> Identify(const grpc::ServerContextBase& ctx) const;
  // Identify, then Principal::CheckRpc(rpc).
  absl::StatusOr<PrincipalPtr> Authorize(const grpc::ServerContextBase& ctx,
                                         absl::string_view rpc) const;
  // The principal of a Unix socket peer with these credentials (by uid, then gid), or
  // PERMISSION_DENIED naming them (the region socket; Identify for gRPC calls).
  absl::StatusOr<PrincipalPtr> IdentifyUnixPeer(const PeerCredentials& cred) const;

 private:
  absl::StatusOr<PrincipalPtr> IdentifyTcp(const grpc::ServerContextBase& ctx) const;

  AuthPolicy policy_;
  const UnixListener* unix_listener_;
};

// Compares a presented secret with a stored one in time that depends only on the presented
// length (no early exit at the first differing byte).
bool ConstantTimeEquals(absl::string_view presented, absl::string_view stored);

}  // namespace cubed
