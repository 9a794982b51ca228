#include "server/service/stream/grpc_stream_wire.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "grpcpp/impl/codegen/proto_utils.h"  // SerializationTraits of protobuf messages.
#include "server/service/status_conversion.h"
#include "spdlog/spdlog.h"

namespace cubed {

// Note [Raw session stream]: the Session method is raw (grpc::ByteBuffer both ways). A read
// hands the request's bytes to the stream's RequestDecoder, which decodes builtin executes
// straight from them (Note [Fast execute decode], execute_decoder.h) and the rest through
// protobuf, and knows the request's wire size: with typed messages gRPC parsed every command into
// protobuf messages first, and the stream walked every parsed request again for its size
// (ByteSizeLong: ~5% of the gRPC thread's samples in P2 over TCP on the 2-core VM). Responses are
// serialized through gRPC's own protobuf serialization traits, as the typed method would. Bytes
// that do not parse end the stream INVALID_ARGUMENT, as on the command ring.

void GrpcStreamWire::StartRead(RequestDecoder* into) {
  into_ = into;
  ServerBidiReactor::StartRead(&read_buffer_);
}

void GrpcStreamWire::OnReadDone(bool ok) {
  if (!ok) {
    events_->OnReadDone(false, 0);
    return;
  }
  // One slice as gRPC received it (usually), else the slices copied into one (a large request,
  // or a compressed one, which this decompresses).
  grpc::Slice bytes;
  if (!read_buffer_.TrySingleSlice(&bytes).ok() && !read_buffer_.DumpToSingleSlice(&bytes).ok()) {
    events_->OnBroken(absl::InvalidArgumentError(
        "SessionStream: a request's bytes could not be read (a compressed message that does not "
        "decompress?)"));
    return;
  }
  read_buffer_.Clear();
  const absl::Status merged =
      into_->Merge(absl::string_view(reinterpret_cast<const char*>(bytes.begin()), bytes.size()));
  if (!merged.ok()) {
    events_->OnBroken(
        absl::Status(merged.code(), absl::StrCat("SessionStream: ", merged.message())));
    return;
  }
  events_->OnReadDone(true, bytes.size());
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
