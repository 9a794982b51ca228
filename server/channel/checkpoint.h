#pragma once

// What a checkpoint holds of one device's sessions, as plain structs (Note [Checkpoint and
// restore], device.h). server/daemon/checkpoint_file.h writes and reads them; the Device
// captures and restores them.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/ids.h"
#include "server/auth/principal.h"

namespace cubed {

// One live handle: its table entry and its bytes (the whole allocation, as a raw read returns
// them).
struct CheckpointedHandle {
  HandleId id;
  uint64_t size = 0;
  uint32_t refcount = 1;
  std::string bytes;  // `size` bytes.
};

// One poisoned id (Note [Poisoned handles], session.h) and its error (carrying kPoisonPayload
// once restored).
struct CheckpointedPoison {
  HandleId id;
  absl::Status error;
};

struct CheckpointedSession {
  SessionId id;
  uint32_t device = 0;
  std::string owner_name;  // Principal name; empty: none.
  PrincipalPtr owner;      // Restore only: the principal of that name in the daemon's policy.
  absl::Duration lease;
  uint64_t stream_seq = 0;  // Session::stream_seq.
  std::vector<CheckpointedHandle> handles;
  std::vector<CheckpointedPoison> poisons;
};

// Receives a device's sessions, or why they could not be read.
using CheckpointCallback =
    absl::AnyInvocable<void(absl::StatusOr<std::vector<CheckpointedSession>>)>;

}  // namespace cubed
