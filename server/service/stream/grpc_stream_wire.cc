#include "server/service/stream/grpc_stream_wire.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "grpcpp/impl/codegen/proto_utils.h"  // SerializationTraits of protobuf messages.
#include "server/service/status_conversion.h"
#include "spdlog/spdlog.h"

namespace cubed {

// Note [Raw session stream]: the Session method is raw (grpc::ByteBuffer both ways); this wire
// parses each request and serializes each response through gRPC's own protobuf serialization
// traits, as the generated typed method would, so that a read reports its wire size: with typed
// messages the stream walked every parsed request again for it (ByteSizeLong: ~5% of the gRPC
// thread's samples in P2 over TCP on the 2-core VM). Bytes that do not parse end the stream
// INVALID_ARGUMENT, as on the command ring.

void GrpcStreamWire::StartRead(v1::SessionRequest* into) {
  into_ = into;
  ServerBidiReactor::StartRead(&read_buffer_);
}

void GrpcStreamWire::OnReadDone(bool ok) {
  if (!ok) {
    events_->OnReadDone(false, 0);
    return;
  }
  const uint64_t bytes = read_buffer_.Length();
  // Parses and clears the buffer, as a typed method's read would.
  if (!grpc::SerializationTraits<v1::SessionRequest>::Deserialize(&read_buffer_, into_).ok()) {
    events_->OnBroken(absl::InvalidArgumentError(
        absl::StrCat("SessionStream: a request of ", bytes,
                     " bytes does not parse as a cubed.v1.SessionRequest")));
    return;
  }
  events_->OnReadDone(true, bytes);  // 0 for an empty request: the stream finds 0 again.
}

void GrpcStreamWire::StartWrite(const v1::SessionResponse* response) {
  // The last write's buffer: done (one write at a time), and the serializer needs it empty.
  write_buffer_.Clear();
  bool own = false;
  const grpc::Status serialized =
      grpc::SerializationTraits<v1::SessionResponse>::Serialize(*response, &write_buffer_, &own);
  if (!serialized.ok()) {
    // Only past 2 GiB, which a response never reaches. The call is cancelled and an empty message
    // written in its place: that write fails, and the stream learns it as from any failed write
    // (OnWriteDone(false)), then finishes the call itself, once.
    unserializable_ = absl::InternalError(
        absl::StrCat("SessionStream: a response does not serialize: ", serialized.error_message()));
    spdlog::error("{}", std::string(unserializable_.message()));
    context_->TryCancel();  // OnCancel, which reads unserializable_, comes after it.
    grpc::Slice empty;
    write_buffer_ = grpc::ByteBuffer(&empty, 1);
  }
  ServerBidiReactor::StartWrite(&write_buffer_);
}

void GrpcStreamWire::Finish(const absl::Status& status) {
  ServerBidiReactor::Finish(ToGrpcStatus(status));
}

void GrpcStreamWire::OnWriteDone(bool ok) { events_->OnWriteDone(ok); }

void GrpcStreamWire::OnCancel() {
  events_->OnBroken(unserializable_.ok() ? absl::CancelledError("the client cancelled the stream")
                                         : unserializable_);
}

void GrpcStreamWire::OnDone() { delete this; }

}  // namespace cubed
