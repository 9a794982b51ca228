#pragma once

// RequestDecoder: a session stream's requests, from their wire bytes (a serialized
// cubed.v1.SessionRequest) to StreamCommands, as protobuf's parse followed by ToStreamCommand
// would give them: builtin executes straight from their bytes (Note [Fast execute decode],
// execute_decoder.h), every other command through protobuf on a reused arena (Note [Request
// arena], request_arena.h), each run of them between two fast ones in one parse, and a whole
// request through protobuf when its top level holds anything but `open` once and `commands`.

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "cubed/v1/session.pb.h"
#include "server/channel/stream_command.h"
#include "server/service/request_conversion.h"
#include "server/service/stream/execute_decoder.h"
#include "server/service/stream/request_arena.h"

namespace cubed {

// What one read of a stream's wire brought: one request, or several merged (the command ring).
// Not thread-safe: one owner at a time (the wire while its read is in flight, then the stream).
class RequestDecoder {
 public:
  // `limits` (copied) bound each command as ToStreamCommand does; a request with more than
  // `max_commands` commands has only its first max_commands converted (too_many() reports it).
  // `fast`: builtin executes decoded straight from their bytes; false: every command through
  // protobuf (the daemon's --fast_execute_decode).
  RequestDecoder(const RequestLimits& limits, uint64_t max_commands, bool fast = true);

  // Decodes one serialized SessionRequest, appending its commands (each converted, a conversion
  // error in its `invalid`) and taking its `open`. INVALID_ARGUMENT naming the size when the
  // bytes do not parse as a SessionRequest; what this call appended is then undone.
  absl::Status Merge(absl::string_view request);

  // Whether a merged request carried `open`, and the last one's.
  bool has_open() const { return has_open_; }
  const v1::SessionRequest::Open& open() const { return open_; }

  // The commands of the requests merged since the last Reset, in order. The caller may move them
  // out, and may swap in an empty vector with room for the next read's.
  std::vector<StreamCommand>& commands() { return commands_; }

  // The command count of the largest merged request over max_commands; 0 when none was.
  uint64_t too_many() const { return too_many_; }

  // Commands decoded straight from their bytes since construction (the rest went through
  // protobuf); for tests and benchmarks.
  uint64_t fast_decoded() const { return fast_decoded_; }

  // Forgets the merged requests (commands cleared, their room kept) for the next read.
  void Reset();

 private:
  // Through protobuf: the whole request, or a run of `count` of its commands (their fields'
  // bytes) into the placeholders commands_[first, first + count) (false when the bytes do not
  // parse).
  absl::Status MergeParsed(absl::string_view request);
  bool ParseRun(absl::string_view run, size_t first, size_t count);
  // Converts parsed's first `count` commands into the placeholders commands_[first ..].
  void ConvertParsed(v1::SessionRequest& parsed, int count, size_t first);

  const RequestLimits limits_;
  const uint64_t max_commands_;
  const bool fast_;
  ExecuteDecoder executes_;
  RequestArena arena_;
  bool has_open_ = false;
  v1::SessionRequest::Open open_;
  std::vector<StreamCommand> commands_;
  uint64_t too_many_ = 0;
  uint64_t fast_decoded_ = 0;
};

}  // namespace cubed
