#pragma once

// --auth_config: a textproto of cubed.v1.AuthConfig (proto/cubed/v1/auth.proto) read into an
// AuthPolicy (server/auth/auth_policy.h). docs/security.md describes the format.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/auth/auth_policy.h"

namespace cubed {

// Reads and checks the config at `path` (and its token_file). INVALID_ARGUMENT naming the file,
// line and column of a syntax error, or the principal and field of a bad value (unknown RPC
// name, duplicate name, a token for an unknown principal, ...). Never puts a token in a message.
absl::StatusOr<AuthPolicy> LoadAuthConfig(const std::string& path);

// As LoadAuthConfig, from text; `source` names it in messages and `base_dir` resolves a relative
// token_file.
absl::StatusOr<AuthPolicy> ParseAuthConfig(absl::string_view text, absl::string_view source,
                                           const std::string& base_dir);

}  // namespace cubed
