#pragma once

// Recorded graphs in a checkpoint: a RecordedGraph to the plain CheckpointedGraph and back.
//
// Note [Checkpointed graphs]: a checkpoint keeps a session's recorded graphs (Note [Recorded
// graphs], graph.h), and a stream's recording in progress, so that after a restore every graph
// replays under its id with the same parameters, as it would have before. A graph's steps are
// resolved launches over slices, which mean nothing to the next daemon, so CaptureGraph names
// each binding by what the checkpoint can restore: a parameter (by index; its slice is the one
// the last replay bound, and every replay binds it anew), a live handle of the session (by id:
// the handle whose slice it is; a slice has at most one handle), or an orphan (by index): a
// slice a graph holds after its handle was released, which the checkpoint stores after the
// session's handles, bytes and all (CheckpointedSession::orphans). With the offset and size of
// each view, the step's kernel, count and mode, that is everything the launch was. A restore
// allocates the orphans with the handles (their bytes verified the same way), rebuilds each graph
// with RestoreGraph, which checks every step as recording checked it, now against the restored
// sizes: each binding inside its target (checked arithmetic), a dynamic count of >= 12 bytes, a
// static count inside the device's limits, unchecked mode only where the daemon allows it,
// builtins through kernels::ValidateBuiltin, and the limits of graph.h (graphs, steps,
// parameters, bytes); the kernel itself was checked by the daemon as an execute's is
// (server/daemon/checkpoint_graphs.h). The graph then holds the slices it binds (parameters
// excepted) as a recording would, each orphan must be held by some restored graph (memory no
// graph keeps is a corrupt checkpoint, not a leak), and is accounted to the session as before.
// Any fault fails the session's restore, freeing everything, and with it the daemon's start.
// Backend state (a captured CUDA graph) is not kept: the first replay after a restore captures
// anew. A recording in progress comes back as it was (the graph so far, or its first failure),
// so the resumed stream's later executes and end_graph carry on recording it.

#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "server/channel/checkpoint.h"
#include "server/channel/graph.h"
#include "server/compute/compute_server.h"

namespace cubed {

// What the checkpoint calls each slice a session's graphs may bind: a handle or an orphan
// (CheckpointedBinding's target and ref; offset and size unused).
using SliceNames = absl::flat_hash_map<SliceId, CheckpointedBinding>;

// `graph` with its bindings named through `names` (parameters by index). INTERNAL when a step
// binds a slice `names` lacks (a broken invariant of Note [Recorded graphs]).
absl::StatusOr<CheckpointedGraph> CaptureGraph(const RecordedGraph& graph, const SliceNames& names);

// A restored session's memory, as the checkpoint names it.
struct GraphTargets {
  struct Target {
    SliceId slice = 0;
    uint64_t size = 0;
  };
  absl::flat_hash_map<uint64_t, Target> handles;  // By handle id.
  std::vector<Target> orphans;                    // By index.
};

// Rebuilds `graph` over `targets`, checking it as Note [Checkpointed graphs] says; the caller
// takes the graph's holds (held()) and accounts its bytes(). DATA_LOSS naming the graph, the
// step and what was wrong; PERMISSION_DENIED for an unchecked step on a daemon that refuses them.
absl::StatusOr<std::unique_ptr<RecordedGraph>> RestoreGraph(CheckpointedGraph graph,
                                                            const GraphTargets& targets,
                                                            const DeviceDescription& device,
                                                            bool allow_unchecked);

}  // namespace cubed
