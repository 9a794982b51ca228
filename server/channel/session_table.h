#pragma once

// SessionTable: the sessions of one device: their ids, leases, owners and what each owner holds
// against its quotas (server/auth/principal.h). It knows nothing of memory: a Device frees a
// session's handles when it takes the session out (Remove).

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/random/random.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/auth/principal.h"
#include "server/channel/session.h"

namespace cubed {

// Owned by the device's server-loop thread (through its Device); not thread-safe.
class SessionTable {
 public:
  // Ids carry `device_index` in their low byte (DeviceOfSession). A lease of 0 ms is
  // `default_lease`; more than `max_lease` is refused.
  SessionTable(uint32_t device_index, absl::Duration default_lease, absl::Duration max_lease);

  // Opens a session for `owner` (null: none) with a random, unguessable id and a memory owner
  // tag of its own (Note [Owner-tagged memory], storage/memory_manager.cc). `lease_ms` as on the
  // wire: 0 is the default; above max_lease INVALID_ARGUMENT naming the value sent.
  // RESOURCE_EXHAUSTED when the owner holds quotas.max_sessions sessions already.
  absl::StatusOr<Session*> Open(uint64_t lease_ms, absl::Time now, PrincipalPtr owner);
  // Note [Checkpoint and restore] (device.h): opens session `id` (from a checkpoint) for `owner`
  // with `lease`, starting at `now`, and a fresh memory owner tag. INVALID_ARGUMENT when `id`
  // does not route to this device or is 0 above its low byte, or `lease` is outside
  // (0, max_lease]; FAILED_PRECONDITION when `id` is open already. Quotas are not checked: the
  // session held what it holds before the restart.
  absl::StatusOr<Session*> Restore(SessionId id, absl::Duration lease, absl::Time now,
                                   PrincipalPtr owner);
  // The open session `id`, its lease renewed; NOT_FOUND saying so otherwise.
  absl::StatusOr<Session*> Find(SessionId id, absl::Time now);
  // The open session `id` without renewing its lease; null when there is none.
  Session* Get(SessionId id) const;
  // Takes session `id` out (null when there is none) and its counts out of its owner's; the
  // caller frees what it holds.
  std::unique_ptr<Session> Remove(SessionId id);
  // The sessions whose lease passed by `now`.
  std::vector<SessionId> Expired(absl::Time now) const;
  // The earliest lease expiry, or InfiniteFuture when no session is open.
  absl::Time NextExpiry() const;
  // Note [Session ownership] (device.h): whether `id` is open and owned by `principal`.
  bool IsOwnedBy(SessionId id, const Principal* principal) const;

  size_t size() const { return sessions_.size(); }
  // Live handles across every open session (O(sessions)).
  uint64_t handle_count() const;
  // Shared-memory regions across every open session (O(sessions)).
  uint64_t region_count() const;
  // Every open session id (for the Device's destructor).
  std::vector<SessionId> ids() const;
  // Calls `visit` with every open session, in no particular order.
  void ForEach(absl::FunctionRef<void(const Session&)> visit) const;

  // OK when one more handle of `bytes` fits the quotas of `session` and its owner; else
  // RESOURCE_EXHAUSTED naming the quota.
  absl::Status CheckQuota(const Session& session, uint64_t bytes) const;
  // Counts a handle of `bytes` in (`sign` +1) or out (-1) of `session` and its owner.
  void Account(Session& session, uint64_t bytes, int sign);

 private:
  // What each owner holds on this device (keyed by the owner's address; the sessions keep the
  // principal alive). Entries are dropped once everything is zero.
  struct OwnerUsage {
    uint64_t sessions = 0;
    uint64_t handles = 0;
    uint64_t bytes = 0;
  };

  uint32_t device_index_;
  absl::Duration default_lease_;
  absl::Duration max_lease_;
  absl::flat_hash_map<SessionId, std::unique_ptr<Session>> sessions_;
  absl::flat_hash_map<const Principal*, OwnerUsage> owners_;
  // The next session's memory owner: a counter, so never reused, unlike session ids.
  MemoryOwner next_memory_owner_ = kFirstSessionOwner;
  absl::BitGen random_;
};

// NOT_FOUND for a session that is not open, in the words every caller uses.
absl::Status SessionNotFound(SessionId session);

}  // namespace cubed
