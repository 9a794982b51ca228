#pragma once

// StreamRunner: runs the commands of one session stream on the device's loop, in order: checks
// seq, applies client ids, poisons on failure (Note [Poisoned handles], session.h) and keeps the
// failures a later sync reports. Replies go to a ReplySink in command order.

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cubed/v1/session.pb.h"
#include "server/device.h"
#include "server/session_stream_commands.h"

namespace cubed {

// Where replies go. Slots are reserved in command order and filled in any order; the sink writes
// them in slot order. Thread-safe.
class ReplySink {
 public:
  virtual ~ReplySink() = default;
  // Reserves the next slot. Called on the loop thread only.
  virtual uint64_t Reserve() = 0;
  // Fills a reserved slot, exactly once; any thread (backend completions).
  virtual void Fill(uint64_t slot, v1::Reply reply) = 0;
};

// Owned by the stream; used only on the device's loop thread.
class StreamRunner {
 public:
  // Opens the stream's session. Errors as Device::OpenSession.
  absl::StatusOr<v1::SessionResponse::Opened> Open(Device& device, uint64_t lease_ms);
  // The open session, 0 before Open succeeded or after Close.
  uint64_t session() const { return session_; }

  // Runs one command; a failure is recorded, poisons, or is answered, never returned. `sink`
  // is kept alive by completions that answer later.
  void Run(Device& device, StreamCommand& command, const std::shared_ptr<ReplySink>& sink);

  // Closes the session (releasing everything it holds) if it is open. Idempotent.
  void Close(Device& device);

 private:
  // Handles a failed command: prefixes the error, poisons, answers or records it.
  void Fail(Device& device, const StreamCommand& command, const absl::Status& status,
            ReplySink& sink, bool id_ok);
  void RunCreate(Device& device, StreamCommand& command, ReplySink& sink);
  void RunRelease(Device& device, StreamCommand& command, ReplySink& sink);
  void RunAnswering(Device& device, StreamCommand& command, const std::shared_ptr<ReplySink>& sink);

  uint64_t session_ = 0;
  bool have_seq_ = false;
  uint64_t last_seq_ = 0;
  // Failures of commands that do not answer, since the previous sync.
  absl::Status first_error_;
  uint64_t failed_ = 0;
};

}  // namespace cubed
