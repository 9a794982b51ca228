#pragma once

// SessionStreamService: the gRPC edge of cubed.v1.SessionStream (proto/cubed/v1/session.proto),
// the pipelined fast path. One bidirectional stream is one session. The reactor converts each
// SessionRequest on the gRPC thread and queues it; the device's loop runs the queued commands in
// order (StreamRunner) and hands replies back; replies are written in command order, one write
// in flight at a time. Nothing here blocks a gRPC thread on device work.
//
// Note [Stream backpressure]: per stream, at most SessionStreamLimits::max_commands commands and
// max_bytes bytes are in flight: received but not yet run (request payload) plus answered but not
// yet written (reply payload). While over either bound the reactor does not call StartRead, so
// gRPC's flow control makes a flooding client wait in its own writes. The loop resumes reading
// once it drained below the bound. When replies pile up because the client does not read them,
// the loop also stops running the stream's commands (the stream "parks") until writes drain, so
// reads cannot grow the reply queue past the bound either. Other streams and unary calls on the
// same loop keep being served: each posted task runs one batch of one stream.

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "cubed/v1/session.grpc.pb.h"
#include "server/device_loop.h"
#include "server/request_conversion.h"

namespace cubed {

// Bounds of one stream (Note [Stream backpressure]).
struct SessionStreamLimits {
  uint64_t max_commands = 4096;              // In flight; also the most per SessionRequest.
  uint64_t max_bytes = uint64_t{256} << 20;  // Payload in flight, bytes.
  uint64_t max_response_bytes = 4 << 20;     // Replies gathered into one SessionResponse.
};

class StreamState;

// Thread-safe: gRPC calls it from its own threads. The loops must outlive the service, and the
// service must outlive the gRPC server it is registered with.
class SessionStreamService final : public v1::SessionStream::CallbackService {
 public:
  SessionStreamService(std::vector<DeviceLoop*> loops, RequestLimits limits,
                       SessionStreamLimits stream_limits = {});
  ~SessionStreamService() override;

  // From now on new streams end UNAVAILABLE at once, and every open stream ends UNAVAILABLE
  // (closing its session). Called first in shutdown.
  void StartDraining();

  grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionResponse>* Session(
      grpc::CallbackServerContext* ctx) override;

  // Streams open now (for tests and metrics).
  size_t open_streams() const;

 private:
  friend class StreamState;
  void Forget(StreamState* state);

  std::vector<DeviceLoop*> loops_;
  RequestLimits limits_;
  SessionStreamLimits stream_limits_;
  std::atomic<bool> draining_{false};
  mutable absl::Mutex mu_;
  // Open streams, so that StartDraining can end them. A state removes itself when it finishes.
  absl::flat_hash_map<StreamState*, std::shared_ptr<StreamState>> open_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cubed
