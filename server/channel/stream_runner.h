#pragma once

// StreamRunner: runs the commands of one session stream on the device's loop, in order: checks
// seq, applies client ids, poisons on failure (Note [Poisoned handles], session.h) and keeps the
// failures a later sync reports. Replies go to a ReplySink in command order.

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/channel/device.h"
#include "server/channel/stream_command.h"
#include "server/channel/stream_reply.h"

namespace cubed {

// Owned by the stream; used only on the device's loop thread.
class StreamRunner {
 public:
  // Opens the stream's session. Errors as Device::OpenSession. `owner` owns the session
  // (Device::OpenSession); `on_closed` is told when something else than Close closes it (its
  // lease, a CloseSession call: Device::WatchSession).
  absl::StatusOr<StreamOpened> Open(Device& device, uint64_t lease_ms, PrincipalPtr owner = nullptr,
                                    Session::ClosedCallback on_closed = nullptr);
  // Resumes `session`, restored from a checkpoint (Note [Checkpoint and restore], device.h),
  // instead of opening one: NOT_FOUND when it is not open or `owner` does not own it (as for an
  // unknown session), FAILED_PRECONDITION when it was not restored or a stream resumed it
  // already. Renews its lease. `on_closed` as for Open.
  absl::StatusOr<StreamOpened> Resume(Device& device, SessionId session, const PrincipalPtr& owner,
                                      Session::ClosedCallback on_closed = nullptr);
  // The open session, SessionId() (0) before Open succeeded or after Close.
  SessionId session() const { return session_; }

  // Runs one command at `now` (the loop's clock, read once per command by the caller); a failure
  // is recorded, poisons, or is answered, never returned. `sink` is kept alive by completions
  // that answer later.
  void Run(Device& device, StreamCommand& command, const std::shared_ptr<ReplySink>& sink,
           absl::Time now);

  // Closes the session (releasing everything it holds) if it is open. Idempotent.
  void Close(Device& device);

  // Bulk commands (Note [Bulk transfers], server/service/stream/bulk_transfers.h). StartBulk checks
  // the seq and, for a create, the id, then allocates (filling command.shape/strides/elem_size with
  // the layout the upload writes into: {size}/{1}/1 for a plain create); for a read it checks the
  // bindings and turns them into command.read_tensor (raw reads as byte tensors). OK: the command
  // now waits for its transfer. Otherwise the failure was handled as Run handles one (poisoned,
  // answered or recorded for sync) and is returned, so that the transfer can fail with it.
  absl::Status StartBulk(Device& device, StreamCommand& command, ReplySink& sink);
  // Ends a command StartBulk accepted. OK: answers (create_tensor: its layout; read: a reply
  // without data). An error releases a create's allocation and poisons its id, or answers a read
  // with it; returns the error as recorded (prefixed for a create).
  absl::Status FinishBulk(Device& device, StreamCommand& command, const absl::Status& status,
                          ReplySink& sink);

  // For metrics: commands that failed so far (answered or not), and the code of the latest.
  uint64_t failures() const { return failures_; }
  absl::StatusCode last_failure_code() const { return last_failure_code_; }

 private:
  // Checks `command.seq` against the previous one (and records it) and returns the seq error,
  // else the command's conversion error. `seq_ok` tells which: a seq error wins over every
  // other error of the command, a bad new id's included (docs/api.md, "Errors do not end the
  // stream").
  absl::Status CheckSeq(const StreamCommand& command, bool& seq_ok);
  // Handles a failed command: prefixes the error, poisons, answers or records it. Returns the
  // error as recorded.
  absl::Status Fail(Device& device, const StreamCommand& command, const absl::Status& status,
                    ReplySink& sink, bool id_ok);
  void RunCreate(Device& device, StreamCommand& command, ReplySink& sink, absl::Time now);
  void RunRelease(Device& device, StreamCommand& command, ReplySink& sink, absl::Time now);
  void RunAnswering(Device& device, StreamCommand& command, const std::shared_ptr<ReplySink>& sink,
                    absl::Time now);
  // A read or read_tensor into a shared-memory region (command.region), answered in `slot`.
  void RunReadIntoRegion(Device& device, StreamCommand& command,
                         const std::shared_ptr<ReplySink>& sink, uint64_t slot);

  SessionId session_;
  std::shared_ptr<uint64_t> seq_cell_;  // The session's Session::stream_seq.
  bool have_seq_ = false;
  uint64_t last_seq_ = 0;
  // Failures of commands that do not answer, since the previous sync.
  absl::Status first_error_;
  uint64_t failed_ = 0;
  uint64_t failures_ = 0;
  absl::StatusCode last_failure_code_ = absl::StatusCode::kOk;
};

}  // namespace cubed
