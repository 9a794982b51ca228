#pragma once

// AuthPolicy: the principals the daemon knows, read from --auth_config (a textproto of
// cubed.v1.AuthConfig, proto/cubed/v1/auth.proto) or the default when there is none.
// docs/security.md describes the format and the default.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/principal.h"

namespace cubed {

struct AuthPolicy {
  std::vector<PrincipalPtr> principals;  // In config order: the first match wins.
  // Plain TCP peers (--insecure_tcp) that present no token: served as this principal when set
  // (the default policy only), refused UNAUTHENTICATED otherwise.
  PrincipalPtr anonymous_tcp;
};

// Reads and checks the config at `path` (and its token_file). INVALID_ARGUMENT naming the file,
// line and column of a syntax error, or the principal and field of a bad value (unknown RPC
// name, duplicate name, a token for an unknown principal, ...). Never puts a token in a message.
absl::StatusOr<AuthPolicy> LoadAuthConfig(const std::string& path);

// As LoadAuthConfig, from text; `source` names it in messages and `base_dir` resolves a relative
// token_file.
absl::StatusOr<AuthPolicy> ParseAuthConfig(absl::string_view text, absl::string_view source,
                                           const std::string& base_dir);

// The policy without --auth_config: principal "local" = Unix peers with the daemon's own uid or
// uid 0, every RPC, client kernels, unchecked (still subject to --allow_unchecked), no quotas;
// and, for --insecure_tcp, principal "insecure-tcp" with the same except client kernels.
AuthPolicy DefaultAuthPolicy();

}  // namespace cubed
