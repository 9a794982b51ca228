#pragma once

// The checkpoint directory (Note [Checkpoint and restore], server/channel/device.h; format:
// proto/cubed/v1/checkpoint.proto): CheckpointWriter stores sessions captured from the devices,
// CheckpointReader verifies a directory's manifest and feeds each session's bytes to its restore.
// One writer or reader per directory at a time.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/auth/auth_policy.h"
#include "server/channel/checkpoint.h"
#include "server/service/request_conversion.h"

namespace cubed {

// What a checkpoint holds.
struct CheckpointStats {
  uint64_t sessions = 0;
  uint64_t handles = 0;
  uint64_t graphs = 0;  // Recorded graphs (Note [Checkpointed graphs]).
  uint64_t bytes = 0;   // Of its two files.
};

// Writes one checkpoint into a directory (Note [Checkpoint I/O], server/channel/device.h): the
// handles' bytes as devices hand them over (Write), then the manifest (Commit). Used by one thread
// at a time (the daemon's, or a device loop's while the daemon waits for it).
class CheckpointWriter {
 public:
  // Starts a checkpoint of `tables` (Device::CaptureTables) in `dir` (created 0700 when missing;
  // an existing one must be a directory owned by this user, and is made 0700): the data file is
  // written 0600 to a temporary name. RESOURCE_EXHAUSTED when it would take more than
  // `max_bytes`, or its manifest more than a restore reads (256 MiB; nothing is written);
  // FAILED_PRECONDITION for a directory that cannot be used; INTERNAL or RESOURCE_EXHAUSTED (disk
  // full) for I/O errors.
  static absl::StatusOr<std::unique_ptr<CheckpointWriter>> Create(
      const std::string& dir, const std::vector<CheckpointedSession>& tables, uint64_t max_bytes);
  // Removes the temporary files unless Commit succeeded: the previous checkpoint, if any, stays.
  ~CheckpointWriter();

  // Appends a batch of handle bytes (a ComputeServer::ReadToHost sink) and digests them.
  // RESOURCE_EXHAUSTED for a full disk; INTERNAL for other I/O errors.
  absl::Status Write(absl::Span<const HostChunk> chunks);
  // Writes the manifest of `sessions` (the tables Device::Capture returned, whose handles and
  // orphans are the ones written, in order), syncs both files and renames them into place,
  // manifest last.
  // INTERNAL when the bytes written do not match the tables; Write's errors.
  absl::StatusOr<CheckpointStats> Commit(const std::vector<CheckpointedSession>& sessions);

 private:
  struct State;
  explicit CheckpointWriter(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// A checkpoint being restored: its manifest verified, its handles' bytes read on demand.
class CheckpointReader {
 public:
  // Reads the manifest in `dir` and verifies all of it before returning: version (1 or 2),
  // digest, sizes, offsets (the handles and orphans tile the data file exactly), ids (sessions
  // of devices 0 .. devices-1, no duplicates), leases (at most `max_lease`), owners (each a
  // principal of `policy`, set in `owner`) and graphs as far as they can be checked without the
  // tables (their kernels as an execute's within `limits`: server/daemon/checkpoint_graphs.h).
  // Any fault is DATA_LOSS (or NOT_FOUND for a missing file, FAILED_PRECONDITION for an unknown
  // principal), with a message naming the file and what was wrong.
  static absl::StatusOr<std::unique_ptr<CheckpointReader>> Open(const std::string& dir,
                                                                const AuthPolicy& policy,
                                                                uint32_t devices,
                                                                absl::Duration max_lease,
                                                                const RequestLimits& limits);
  ~CheckpointReader();

  // The sessions' tables; a caller may move them out.
  std::vector<CheckpointedSession>& sessions();
  // The source of sessions()[i]'s bytes (Device::RestoreSession): reads the data file into the
  // chunks and checks each handle's and orphan's SHA-256 (DATA_LOSS naming the data file and
  // the handle).
  // Used on one thread at a time, while this reader lives.
  std::unique_ptr<CheckpointSource> Source(size_t i);

 private:
  struct State;
  explicit CheckpointReader(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace cubed
