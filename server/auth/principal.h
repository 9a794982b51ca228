#pragma once

// Principal: who a call comes from, as the daemon's auth config (proto/cubed/v1/auth.proto)
// describes it, with what it may do and how much it may hold. docs/security.md explains each
// setting. A call's principal is found by the Authenticator (server/service/authenticator.h).

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace cubed {

// Limits; 0 = none. See proto/cubed/v1/auth.proto (Quotas) for each.
struct Quotas {
  uint64_t max_bytes = 0;
  uint64_t max_handles = 0;
  uint64_t max_inflight_commands = 0;
  uint64_t max_sessions = 0;
  uint64_t max_session_bytes = 0;
  uint64_t max_session_handles = 0;
  uint64_t max_session_inflight_commands = 0;
};

// Immutable once built, except the in-flight counter (atomic). Shared (shared_ptr) by the
// Authenticator, calls and sessions; thread-safe.
struct Principal {
  std::string name;
  std::vector<uint32_t> uids;
  std::vector<uint32_t> gids;
  std::vector<std::string> cert_common_names;
  std::string token;  // Bearer token; empty = none. Never logged.

  bool all_rpcs = false;
  absl::flat_hash_set<std::string> rpcs;  // Compute RPC names, when !all_rpcs.
  bool client_kernels = false;
  bool unchecked = false;
  Quotas quotas;

  // Commands accepted at the edge and not yet run on the device loop (quota
  // max_inflight_commands). Changed by the edge (increment) and the loop (decrement).
  mutable std::atomic<uint64_t> inflight{0};

  // OK when the principal may call `rpc` (a Compute RPC name); PERMISSION_DENIED naming the RPC
  // and the principal otherwise.
  absl::Status CheckRpc(absl::string_view rpc) const;
  // Checks an execute's kernel kind and mode: PERMISSION_DENIED naming permissions.client_kernels
  // or permissions.unchecked.
  absl::Status CheckExecute(bool client_kernel, bool unchecked_mode) const;
  // Takes one in-flight slot: RESOURCE_EXHAUSTED naming quota max_inflight_commands when none is
  // left. Each success must be paired with ReleaseInflight.
  absl::Status AcquireInflight() const;
  void ReleaseInflight(uint64_t n = 1) const { inflight.fetch_sub(n, std::memory_order_acq_rel); }
  // Takes up to `n` slots at once and returns how many it took (all `n` without the quota).
  uint64_t AcquireInflightUpTo(uint64_t n) const;
};

using PrincipalPtr = std::shared_ptr<const Principal>;

}  // namespace cubed
