#pragma once

// A checkpoint's recorded graphs in their manifest form (proto/cubed/v1/checkpoint.proto) and
// back (Note [Checkpointed graphs], server/channel/graph_checkpoint.h). Reading checks what can
// be checked without the session's tables, as the service edge checks an execute (the same
// conversion, ToExecuteCommand); the Device checks the rest when it restores the graph. Pure;
// any thread.

#include "absl/status/statusor.h"
#include "cubed/v1/checkpoint.pb.h"
#include "server/channel/checkpoint.h"
#include "server/service/request_conversion.h"

namespace cubed {

// Writes `graph` into `out` (empty).
void GraphToManifest(const CheckpointedGraph& graph, v1::CheckpointGraph* out);
// Writes `recording` into `out` (empty); a failure's message is cut to `max_message` bytes.
void RecordingToManifest(const CheckpointedRecording& recording, size_t max_message,
                         v1::CheckpointRecording* out);

// The graph `in` describes. INVALID_ARGUMENT naming the step and field that is wrong: a kernel,
// metadata or mode an execute could not carry (`limits`), more buffers than it could, a binding
// without a target, scalars that are not whole elements of a known type (bool: 0 or 1), or a
// type twice.
absl::StatusOr<CheckpointedGraph> GraphFromManifest(const v1::CheckpointGraph& in,
                                                    const RequestLimits& limits);
// The recording `in` describes: a graph, or a failure with a code 1 .. 16 and a message of at
// most `max_message` bytes, never both; INVALID_ARGUMENT otherwise, or GraphFromManifest's.
absl::StatusOr<CheckpointedRecording> RecordingFromManifest(const v1::CheckpointRecording& in,
                                                            const RequestLimits& limits,
                                                            size_t max_message);

}  // namespace cubed
