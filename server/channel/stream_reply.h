#pragma once

// StreamReply: the answer of one session-stream command in plain C++ form, made on the device's
// loop (or a backend completion); the stream's edge converts it to its wire form (cubed.v1.Reply,
// server/service/wire_conversion.h) when it writes it. ReplySink: where replies go.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/ids.h"
#include "common/memory_usage.h"

namespace cubed {

struct StreamReply {
  enum class Result { kNone, kRead, kDuration, kMemoryUsage, kTensor, kRegionBytes, kGraphSteps };

  uint64_t seq = 0;
  absl::Status status;           // The command's outcome.
  uint64_t failed_commands = 0;  // sync: commands failed since the previous sync.
  Result result = Result::kNone;
  std::vector<std::string> read;  // kRead: one entry per binding.
  uint64_t duration_ns = 0;       // kDuration: end_profile's device time.
  MemoryUsage memory_usage;       // kMemoryUsage.
  std::vector<uint64_t> strides;  // kTensor: elements per step of each dimension.
  uint64_t tensor_size = 0;       // kTensor: bytes allocated, padding included.
  uint64_t region_bytes = 0;      // kRegionBytes: bytes a read wrote into a region.
  uint64_t graph_steps = 0;       // kGraphSteps: end_graph's executes recorded.
};

// Where a stream's replies go. Slots are reserved in command order and filled in any order; the
// sink writes them in slot order. Thread-safe.
class ReplySink {
 public:
  virtual ~ReplySink() = default;
  // Reserves the next slot. Called on the loop thread only.
  virtual uint64_t Reserve() = 0;
  // Fills a reserved slot, exactly once; any thread (backend completions).
  virtual void Fill(uint64_t slot, StreamReply reply) = 0;
};

// The session a stream opened (StreamRunner::Open).
struct StreamOpened {
  SessionId session;
  uint64_t lease_ms = 0;
  uint64_t first_client_id = 0;  // The smallest id the client may choose (kFirstClientId).
  // Resume only (Note [Checkpoint and restore], device.h): the last seq of the session's stream
  // that ran before the checkpoint; 0 when none ran.
  uint64_t resumed_seq = 0;
};

}  // namespace cubed
