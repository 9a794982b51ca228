#pragma once

// SessionStreamService: the gRPC edge of cubed.v1.SessionStream (proto/cubed/v1/session.proto),
// the pipelined fast path. One bidirectional stream (or one command ring: Attach) is one session.
// The reactor converts each SessionRequest on the gRPC thread and queues it; the device's loop runs
// the queued commands in order (StreamRunner) and hands replies back; replies are written in
// command order, one write in flight at a time. Nothing here blocks a gRPC thread on device work.
//
// Note [Stream backpressure]: per stream, at most SessionStreamLimits::max_commands commands and
// max_bytes bytes are in flight: received but not yet run (request payload) plus answered but not
// yet written (reply payload). While over either bound the reactor does not call StartRead, so
// gRPC's flow control makes a flooding client wait in its own writes. The loop resumes reading
// once it drained below the bound. When replies pile up because the client does not read them,
// the loop also stops running the stream's commands (the stream "parks") until writes drain, so
// reads cannot grow the reply queue past the bound either. Other streams and unary calls on the
// same loop keep being served: each posted task is one turn of one stream (Note [Stream turns]).
//
// Note [Stream turns]: a stream's turn on its loop runs up to kTurnCommands of its commands,
// across as many of its received batches as that takes, splitting a larger batch; then the stream
// goes to the back of the loop's queue. Turns of one batch each made the share of a stream that
// of its batches' sizes: a client whose commands were read as they came (a spinning ring thread:
// batches of a few commands) got a few commands a turn beside clients read 256 at a time
// (P9 on a 16-core H100 host, run 79: the slowest of four clients at 0.21-0.38x of the fastest).

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "common/ids.h"
#include "cubed/v1/session.grpc.pb.h"
#include "server/channel/device_loop.h"
#include "server/metrics/metrics.h"
#include "server/service/authenticator.h"
#include "server/service/request_conversion.h"
#include "server/service/stream/stream_wire.h"

namespace cubed {

// Bounds of one stream (Note [Stream backpressure]).
struct SessionStreamLimits {
  uint64_t max_commands = 4096;              // In flight; also the most per SessionRequest.
  uint64_t max_bytes = uint64_t{256} << 20;  // Payload in flight, bytes.
  uint64_t max_response_bytes = 4 << 20;     // Replies gathered into one SessionResponse.
  // Builtin executes decoded straight from their bytes (Note [Fast execute decode]).
  bool fast_execute_decode = false;
};

class StreamState;
class BulkTransfers;

// Thread-safe: gRPC calls it from its own threads. The loops must outlive the service, and the
// service must outlive the gRPC server it is registered with.
// Upload and Download are raw methods (grpc::ByteBuffer): upload chunks are parsed in place and
// download chunks written as a small serialized header plus the piece's bytes as one slice,
// without copying the bytes into or out of a message (Note [Bulk transfers], bulk_transfers.h).
// On the wire they are the UploadChunk / UploadDone / DownloadChunk of session.proto.
// Session is raw too: its reactor parses requests and serializes responses itself (Note [Raw
// session stream], grpc_stream_wire.cc).
using SessionStreamServiceBase = v1::SessionStream::WithRawCallbackMethod_Session<
    v1::SessionStream::WithRawCallbackMethod_Upload<
        v1::SessionStream::WithRawCallbackMethod_Download<v1::SessionStream::Service>>>;

class SessionStreamService final : public SessionStreamServiceBase {
 public:
  // Records streams and their commands in `metrics` (null: a registry of its own), which must
  // outlive the service.
  SessionStreamService(std::vector<DeviceLoop*> loops, RequestLimits limits,
                       SessionStreamLimits stream_limits = {}, Metrics* metrics = nullptr);
  ~SessionStreamService() override;

  // From now on new streams end UNAVAILABLE at once, and every open stream ends UNAVAILABLE
  // (closing its session). Called first in shutdown.
  void StartDraining();
  // Every later stream is authorized by `auth` (authenticator.h), which must outlive the
  // service: opening needs OpenSession, each command the RPC of its name; the session belongs to
  // the stream's principal. Without one (unit tests) everything is allowed. Call before serving.
  void SetAuthenticator(const Authenticator* auth) { auth_ = auth; }

  // The session stream, raw (Note [Raw session stream]): serialized SessionRequests in,
  // serialized SessionResponses out, as the generated typed method would carry them.
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Session(
      grpc::CallbackServerContext* ctx) override;

  // Serves one session stream over another wire than gRPC (the command ring, Note [Command
  // ring] in common/shm_ring.h) for `principal`, already authorized for OpenSession (null without
  // an authenticator). `wire` must stay valid until the stream calls its Finish, and reports to
  // the returned events. While draining, the stream ends UNAVAILABLE at once.
  std::shared_ptr<StreamEvents> Attach(StreamWire* wire, PrincipalPtr principal);

  // Bulk transfers of a stream's command (Note [Bulk transfers], bulk_transfers.h). Each
  // message read is a serialized UploadChunk; `response` gets a serialized UploadDone.
  grpc::ServerReadReactor<grpc::ByteBuffer>* Upload(grpc::CallbackServerContext* ctx,
                                                    grpc::ByteBuffer* response) override;
  // `request` is a serialized DownloadRequest; each chunk written a serialized DownloadChunk.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Download(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* request) override;

  // Streams open now (for tests and metrics).
  size_t open_streams() const;

  // The bulk transfers of the stream of `session`, or null when no open stream has it or it
  // belongs to another principal than `caller` (both null without an authenticator).
  std::shared_ptr<BulkTransfers> FindBulk(SessionId session, const Principal* caller) const;

 private:
  friend class StreamState;
  void Forget(StreamState* state);
  // A stream's session is joined to its transfers from open to close.
  void RegisterBulk(SessionId session, std::weak_ptr<BulkTransfers> bulk, PrincipalPtr owner);
  void UnregisterBulk(SessionId session);
  struct BulkEntry {
    std::weak_ptr<BulkTransfers> bulk;
    PrincipalPtr owner;
  };

  std::vector<DeviceLoop*> loops_;
  RequestLimits limits_;
  SessionStreamLimits stream_limits_;
  std::unique_ptr<Metrics> own_metrics_;
  Metrics* metrics_;
  std::atomic<bool> draining_{false};
  const Authenticator* auth_ = nullptr;
  mutable absl::Mutex mu_;
  // Open streams, so that StartDraining can end them. A state removes itself when it finishes.
  absl::flat_hash_map<StreamState*, std::shared_ptr<StreamState>> open_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<SessionId, BulkEntry> bulk_ ABSL_GUARDED_BY(mu_);  // By session id.
};

}  // namespace cubed
