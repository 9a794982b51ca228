#pragma once

// The checkpoint directory (Note [Checkpoint and restore], server/channel/device.h; format:
// proto/cubed/v1/checkpoint.proto): WriteCheckpoint stores sessions captured from the devices,
// ReadCheckpoint verifies a directory as a whole and returns them for restore. Plain functions;
// callable from any thread, one call per directory at a time.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/auth/auth_policy.h"
#include "server/channel/checkpoint.h"

namespace cubed {

// What a checkpoint holds.
struct CheckpointStats {
  uint64_t sessions = 0;
  uint64_t handles = 0;
  uint64_t bytes = 0;  // Of its two files.
};

// Writes `sessions` to `dir` (created 0700 when missing; an existing one must be a directory
// owned by this user, and is made 0700), replacing the checkpoint there: data and manifest are
// written 0600 to temporary names, synced and renamed, manifest last. RESOURCE_EXHAUSTED when
// they would take more than `max_bytes` (nothing is written) or the disk is full;
// FAILED_PRECONDITION for a directory that cannot be used; INTERNAL for other I/O errors. On any
// error no temporary file is left and the previous checkpoint, if any, is as it was.
absl::StatusOr<CheckpointStats> WriteCheckpoint(const std::string& dir,
                                                const std::vector<CheckpointedSession>& sessions,
                                                uint64_t max_bytes);

// Reads the checkpoint in `dir` and verifies all of it before returning anything: version,
// digests, sizes, offsets, ids (sessions of devices 0 .. devices-1, no duplicates), leases
// (at most `max_lease`) and owners (each a principal of `policy`, set in `owner`). Any fault is
// DATA_LOSS (or NOT_FOUND for a missing file, FAILED_PRECONDITION for an unknown principal),
// with a message naming the file and what was wrong.
absl::StatusOr<std::vector<CheckpointedSession>> ReadCheckpoint(const std::string& dir,
                                                                const AuthPolicy& policy,
                                                                uint32_t devices,
                                                                absl::Duration max_lease);

}  // namespace cubed
