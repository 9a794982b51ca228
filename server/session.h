#pragma once

// Session: the unit of ownership and isolation (ARCHITECTURE.md §3). A session's handle table
// maps opaque ids to refcounted slices; ids are unique within the session and not sequential.

#include <cstdint>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "server/compute_server.h"

namespace cubed {

struct HandleEntry {
  SliceId slice = 0;
  uint64_t size = 0;      // Bytes of the allocation as the client sees it.
  uint32_t refcount = 1;  // References held by the client (Release drops them).
};

// Owned by the device's server-loop thread.
class Session {
 public:
  Session(uint64_t id, absl::Duration lease, absl::Time now, uint64_t id_key);

  uint64_t id() const { return id_; }
  absl::Duration lease() const { return lease_; }
  absl::Time expiry() const { return last_used_ + lease_; }
  void Touch(absl::Time now) { last_used_ = now; }

  // Adds a handle over `slice` with one reference and returns its new id.
  uint64_t AddHandle(SliceId slice, uint64_t size);
  // The entry of a handle; nullptr when this session has no such handle.
  HandleEntry* Find(uint64_t handle);
  // Removes a handle from the table (its slice is the caller's to free).
  void Erase(uint64_t handle) { handles_.erase(handle); }

  const absl::flat_hash_map<uint64_t, HandleEntry>& handles() const { return handles_; }

  // The open profile, if any (one per session).
  std::optional<ProfileToken>& profile() { return profile_; }

 private:
  uint64_t id_;
  absl::Duration lease_;
  absl::Time last_used_;
  uint64_t id_key_;        // Per-session key that scrambles handle ids.
  uint64_t next_serial_ = 1;
  absl::flat_hash_map<uint64_t, HandleEntry> handles_;
  std::optional<ProfileToken> profile_;
};

}  // namespace cubed
