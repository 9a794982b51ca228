#include "server/channel/stream_command.h"

namespace cubed {

using Kind = StreamCommand::Kind;

absl::string_view KindName(Kind kind) {
  switch (kind) {
    case Kind::kNone:
      return "none";
    case Kind::kCreate:
      return "create";
    case Kind::kCreateTensor:
      return "create_tensor";
    case Kind::kEmpty:
      return "empty";
    case Kind::kEmptyTensor:
      return "empty_tensor";
    case Kind::kExecute:
      return "execute";
    case Kind::kRelease:
      return "release";
    case Kind::kRead:
      return "read";
    case Kind::kReadTensor:
      return "read_tensor";
    case Kind::kFlush:
      return "flush";
    case Kind::kSync:
      return "sync";
    case Kind::kMemoryUsage:
      return "memory_usage";
    case Kind::kMemoryCleanup:
      return "memory_cleanup";
    case Kind::kStartProfile:
      return "start_profile";
    case Kind::kEndProfile:
      return "end_profile";
    case Kind::kReleaseRegion:
      return "release_region";
    case Kind::kBeginGraph:
      return "begin_graph";
    case Kind::kEndGraph:
      return "end_graph";
    case Kind::kReplayGraph:
      return "replay_graph";
    case Kind::kReleaseGraph:
      return "release_graph";
  }
  return "unknown";
}

bool Answers(Kind kind) {
  switch (kind) {
    case Kind::kRead:
    case Kind::kReadTensor:
    case Kind::kSync:
    case Kind::kEndProfile:
    case Kind::kMemoryUsage:
    case Kind::kEndGraph:
      return true;
    default:
      return false;
  }
}

}  // namespace cubed
