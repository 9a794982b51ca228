#pragma once

// StreamWire: the transport under one session stream: gRPC's bidirectional stream
// (GrpcStreamWire, grpc_stream_wire.h) or the command ring (server/service/ring/ring_wire.h). The
// stream's logic (SessionStreamService's StreamState) reads requests and writes responses through
// it, and the wire reports what happened through StreamEvents.
//
// The rules are those of grpc::ServerBidiReactor: at most one read and one write in flight;
// a wire never calls StreamEvents from inside StartRead, StartWrite or Finish (their callers
// hold a lock the events take); after Finish the stream makes no more calls.

#include <cstdint>

#include "absl/status/status.h"
#include "cubed/v1/session.pb.h"
#include "server/service/stream/request_decoder.h"

namespace cubed {

class StreamWire {
 public:
  virtual ~StreamWire() = default;
  // Reads the next request (on the ring, maybe several, merged) and decodes it with `into`
  // (RequestDecoder::Merge), which stays valid until OnReadDone; bytes that do not decode end the
  // stream through OnBroken with Merge's error.
  virtual void StartRead(RequestDecoder* into) = 0;
  // Writes `response`, which stays valid (and unchanged) until OnWriteDone.
  virtual void StartWrite(const v1::SessionResponse* response) = 0;
  // Ends the stream with `status`, after the writes started before it.
  virtual void Finish(const absl::Status& status) = 0;
};

// What a wire reports. Thread-safe; called on the wire's threads.
class StreamEvents {
 public:
  virtual ~StreamEvents() = default;
  // A read finished: `ok` false when the client half-closed or the wire broke. `wire_bytes`: the
  // size of the request(s) read, as serialized.
  virtual void OnReadDone(bool ok, uint64_t wire_bytes) = 0;
  // A write finished: `ok` false when the wire broke.
  virtual void OnWriteDone(bool ok) = 0;
  // The client went away, or broke the wire's rules: the stream ends with `status`, closing its
  // session.
  virtual void OnBroken(absl::Status status) = 0;
};

}  // namespace cubed
