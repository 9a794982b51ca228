#pragma once

// What a checkpoint holds of one device's sessions, as plain structs (Note [Checkpoint and
// restore], device.h). server/daemon/checkpoint_file.h writes and reads them; the Device
// captures and restores them.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/ids.h"
#include "server/auth/principal.h"
#include "server/compute/compute_server.h"

namespace cubed {

// One live handle's table entry; its bytes (the whole allocation, as a raw read returns them)
// travel separately, as HostChunks (Note [Checkpoint I/O], device.h).
struct CheckpointedHandle {
  HandleId id;
  uint64_t size = 0;
  uint32_t refcount = 1;
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

// Where a restored session's bytes come from (Note [Checkpoint I/O], device.h). Used on the
// device's loop thread during Device::RestoreSession.
class CheckpointSource {
 public:
  virtual ~CheckpointSource() = default;
  // Fills `chunks` of the session's handles (HostChunk::index: the position in
  // CheckpointedSession::handles), handed out in order; an error fails the restore.
  virtual absl::Status Fill(absl::Span<const HostChunk> chunks) = 0;
  // After the last Fill: OK only when every handle was filled whole and its bytes verified.
  virtual absl::Status Finish() = 0;
};

}  // namespace cubed
