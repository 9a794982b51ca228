#include "server/auth/auth_policy.h"

#include <unistd.h>

#include <memory>

namespace cubed {

AuthPolicy DefaultAuthPolicy() {
  AuthPolicy policy;
  auto local = std::make_shared<Principal>();
  local->name = "local";
  local->uids = {static_cast<uint32_t>(getuid())};
  if (getuid() != 0) local->uids.push_back(0);
  local->all_rpcs = true;
  local->client_kernels = true;
  local->unchecked = true;
  policy.principals.push_back(local);
  auto tcp = std::make_shared<Principal>();
  tcp->name = "insecure-tcp";
  tcp->all_rpcs = true;
  tcp->unchecked = true;
  policy.anonymous_tcp = tcp;
  return policy;
}

}  // namespace cubed
