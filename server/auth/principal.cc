#include "server/auth/principal.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace cubed {

absl::Status Principal::CheckRpc(absl::string_view rpc) const {
  if (all_rpcs || rpcs.contains(rpc)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat("principal '", name, "' may not call ", rpc,
                                                  " (permissions.rpcs of --auth_config)"));
}

absl::Status Principal::CheckExecute(bool client_kernel, bool unchecked_mode) const {
  if (client_kernel && !client_kernels) {
    return absl::PermissionDeniedError(absl::StrCat(
        "kernel: principal '", name,
        "' may not run client-shipped kernels (cuda_source/ptx): permissions.client_kernels is "
        "not granted"));
  }
  if (unchecked_mode && !unchecked) {
    return absl::PermissionDeniedError(
        absl::StrCat("mode: principal '", name,
                     "' may not execute unchecked: permissions.unchecked is not granted"));
  }
  return absl::OkStatus();
}

absl::Status Principal::AcquireInflight() const {
  const uint64_t before = inflight.fetch_add(1, std::memory_order_acq_rel);
  if (quotas.max_inflight_commands != 0 && before >= quotas.max_inflight_commands) {
    inflight.fetch_sub(1, std::memory_order_acq_rel);
    return absl::ResourceExhaustedError(
        absl::StrCat("quota max_inflight_commands of principal '", name, "' (",
                     quotas.max_inflight_commands, ") reached: wait for earlier calls to finish"));
  }
  return absl::OkStatus();
}

uint64_t Principal::AcquireInflightUpTo(uint64_t n) const {
  const uint64_t max = quotas.max_inflight_commands;
  uint64_t now = inflight.load(std::memory_order_acquire);
  for (;;) {
    const uint64_t room = max == 0 ? n : (now >= max ? 0 : max - now);
    const uint64_t take = std::min(n, room);
    if (take == 0) return 0;
    if (inflight.compare_exchange_weak(now, now + take, std::memory_order_acq_rel)) return take;
  }
}

}  // namespace cubed
