#pragma once

// The commands of the session stream (proto/cubed/v1/session.proto) in plain C++ form: converted
// and checked on the gRPC thread (server/service/stream/stream_command_conversion.h), run later
// on the device's loop. A command that fails conversion is kept (with its error) so that it fails
// in its place in the order.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/channel/commands.h"

namespace cubed {

struct StreamCommand {
  enum class Kind {
    kNone,  // No oneof member set: fails with INVALID_ARGUMENT.
    kCreate,
    kCreateTensor,
    kEmpty,
    kEmptyTensor,
    kExecute,
    kRelease,
    kRead,
    kReadTensor,
    kFlush,
    kSync,
    kMemoryUsage,
    kMemoryCleanup,
    kStartProfile,
    kEndProfile,
    kReleaseRegion,
    kBeginGraph,
    kEndGraph,
    kReplayGraph,
    kReleaseGraph,
  };
  static constexpr Kind kLastKind = Kind::kReleaseGraph;

  uint64_t seq = 0;
  Kind kind = Kind::kNone;
  // Not OK when conversion failed: the command fails with this error when its turn comes.
  absl::Status invalid;

  HandleId id;                  // create, create_tensor, empty, empty_tensor.
  std::string data;             // create, create_tensor.
  std::vector<uint64_t> shape;  // create_tensor, empty_tensor.
  uint32_t elem_size = 0;       // create_tensor, empty_tensor.
  uint64_t size = 0;            // empty.
  ExecuteCommand execute;
  // Handles an execute writes, poisoned when it fails: builtin kernels the last buffer, client
  // CUDA kernels every buffer. A replay_graph's: the bindings its graph writes (Device fills it).
  HandleList outputs;
  std::vector<HandleId> ids;           // release; begin_graph's parameters; replay's bindings.
  GraphId graph;                       // begin_graph, replay_graph, release_graph.
  std::vector<BindingRef> read;        // read.
  std::vector<TensorRef> read_tensor;  // read_tensor.
  // Bulk create / read (Note [Bulk transfers], server/service/stream/bulk_transfers.h): the bytes
  // move on Upload / Download. For a bulk create, `size` is the byte count the upload must bring.
  bool bulk = false;
  std::vector<uint64_t> strides;  // A bulk create's layout once allocated (shape: `shape`).
  uint64_t allocated = 0;         // A bulk create's allocation, bytes (padding included).
  // Region commands (Note [Shared-memory regions], shared_region.h): a create's source or a
  // read's destination; release_region's region (`region->region`).
  std::optional<RegionRange> region;
};

// Whether `command` is a bulk create (create.bulk_size, create_tensor.bulk) or a bulk read.
inline bool IsBulkCreate(const StreamCommand& c) {
  return c.bulk &&
         (c.kind == StreamCommand::Kind::kCreate || c.kind == StreamCommand::Kind::kCreateTensor);
}
inline bool IsBulkRead(const StreamCommand& c) {
  return c.bulk &&
         (c.kind == StreamCommand::Kind::kRead || c.kind == StreamCommand::Kind::kReadTensor);
}

// The command's kind as in error messages and the proto ("create", "execute", ...).
absl::string_view KindName(StreamCommand::Kind kind);

// Whether a command of this kind answers with a Reply (and so reports its own failure).
bool Answers(StreamCommand::Kind kind);

}  // namespace cubed
