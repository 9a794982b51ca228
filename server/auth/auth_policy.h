#pragma once

// AuthPolicy: the principals the daemon knows (principal.h), from --auth_config
// (server/daemon/auth_config.h) or the default when there is none. docs/security.md describes
// both.

#include <vector>

#include "server/auth/principal.h"

namespace cubed {

struct AuthPolicy {
  std::vector<PrincipalPtr> principals;  // In config order: the first match wins.
  // Plain TCP peers (--insecure_tcp) that present no token: served as this principal when set
  // (the default policy only), refused UNAUTHENTICATED otherwise.
  PrincipalPtr anonymous_tcp;
};

// The policy without --auth_config: principal "local" = Unix peers with the daemon's own uid or
// uid 0, every RPC, client kernels, unchecked (still subject to --allow_unchecked), no quotas;
// and, for --insecure_tcp, principal "insecure-tcp" with the same except client kernels.
AuthPolicy DefaultAuthPolicy();

}  // namespace cubed
