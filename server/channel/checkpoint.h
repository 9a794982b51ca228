#pragma once

// What a checkpoint holds of one device's sessions, as plain structs (Note [Checkpoint and
// restore], device.h). server/daemon/checkpoint_file.h writes and reads them; the Device
// captures and restores them.

#include <cstdint>
#include <optional>
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
  bool imported = false;  // Imported memory (Note [Imported memory]); restored as a copy.
};

// Memory only graphs keep (Note [Checkpointed graphs], graph_checkpoint.h): a slice whose handle
// was released while a graph used it. Its bytes travel after the session's handles'.
struct CheckpointedOrphan {
  uint64_t size = 0;
  SliceId slice = 0;  // Capture only: the slice on this device.
};

// A byte range a graph step binds (Note [Checkpointed graphs]): of a handle (`ref`: its id), of
// an orphan (`ref`: its index in CheckpointedSession::orphans) or of a parameter of the graph
// (`ref`: its index).
struct CheckpointedBinding {
  enum class Target { kHandle, kOrphan, kParameter };
  Target target = Target::kHandle;
  uint64_t ref = 0;
  uint64_t offset = 0;  // Bytes from the target's start.
  uint64_t size = 0;    // Bytes of the view.
};

// One recorded execute: the launch with its bindings named, not resolved.
struct CheckpointedStep {
  KernelCall kernel;
  bool unchecked = false;
  bool dynamic_count = false;
  uint32_t count[3] = {1, 1, 1};      // Static count.
  CheckpointedBinding count_binding;  // Dynamic count.
  std::vector<CheckpointedBinding> buffers;
};

// One recorded graph (Note [Recorded graphs], graph.h).
struct CheckpointedGraph {
  GraphId id;
  std::vector<HandleId> parameters;
  std::vector<uint64_t> parameter_sizes;  // One per parameter.
  std::vector<uint32_t> written;          // Indices of the parameters some step writes.
  std::vector<CheckpointedStep> steps;
};

// A stream's recording in progress: the graph so far, or (graph empty) its first failure.
struct CheckpointedRecording {
  std::optional<CheckpointedGraph> graph;
  absl::Status failure;
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
  std::vector<CheckpointedOrphan> orphans;
  std::vector<CheckpointedGraph> graphs;
  std::optional<CheckpointedRecording> recording;
};

// Where a restored session's bytes come from (Note [Checkpoint I/O], device.h). Used on the
// device's loop thread during Device::RestoreSession.
class CheckpointSource {
 public:
  virtual ~CheckpointSource() = default;
  // Fills `chunks` of the session's handles and then its orphans (HostChunk::index: the position
  // in CheckpointedSession::handles, then handles.size() + the position in orphans), handed out
  // in order; an error fails the restore.
  virtual absl::Status Fill(absl::Span<const HostChunk> chunks) = 0;
  // After the last Fill: OK only when every handle was filled whole and its bytes verified.
  virtual absl::Status Finish() = 0;
};

}  // namespace cubed
