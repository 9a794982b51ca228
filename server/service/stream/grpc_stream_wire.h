#pragma once

// GrpcStreamWire: the session stream's wire over gRPC, the reactor of the raw Session method
// (Note [Raw session stream] in grpc_stream_wire.cc). The command ring is the other wire
// (server/service/ring/ring_wire.h); the stream's logic is SessionStreamService's.

#include <memory>

#include "absl/status/status.h"
#include "cubed/v1/session.pb.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/byte_buffer.h"
#include "server/service/stream/stream_wire.h"

namespace cubed {

// One gRPC session stream. Created by the service's Session handler, which must Bind it to the
// stream's events before gRPC calls it (before the handler returns); deletes itself when gRPC
// is done with the call (OnDone). Its StreamWire calls follow StreamWire's rules (one read and
// one write in flight, none after Finish); it reports on gRPC's threads.
class GrpcStreamWire final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
                             public StreamWire {
 public:
  // `context`: the call's, valid until OnDone.
  explicit GrpcStreamWire(grpc::CallbackServerContext* context) : context_(context) {}

  // The stream this wire reports to; kept alive by the wire until OnDone.
  void Bind(std::shared_ptr<StreamEvents> events) { events_ = std::move(events); }

  // StreamWire. A read decodes the request with `into` and reports its wire size; bytes that do
  // not parse end the stream INVALID_ARGUMENT. A response that cannot be serialized (past 2 GiB)
  // cancels the call; the stream then sees a failed write and ends INTERNAL, naming it.
  void StartRead(RequestDecoder* into) override;
  void StartWrite(const v1::SessionResponse* response) override;
  void Finish(const absl::Status& status) override;

  // grpc::ServerBidiReactor.
  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  grpc::CallbackServerContext* context_;
  std::shared_ptr<StreamEvents> events_;
  absl::Status unserializable_;     // Set before StartWrite cancels the call.
  RequestDecoder* into_ = nullptr;  // The read's target, from StartRead to OnReadDone.
  grpc::ByteBuffer read_buffer_;
  grpc::ByteBuffer write_buffer_;  // The response being written, until OnWriteDone.
};

}  // namespace cubed
