#include "client/session_wire.h"

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/status_conversion.h"
#include "common/status_macros.h"
#include "cubed/v1/session.grpc.pb.h"
#include "google/protobuf/io/coded_stream.h"
#include "grpcpp/client_context.h"
#include "grpcpp/impl/rpc_method.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "grpcpp/support/sync_stream.h"

namespace cubed {

namespace {

// Appends the tag and length of a SessionRequest `commands` field holding `size` bytes to `out`,
// with room for those bytes after them, and returns where they go. INVALID_ARGUMENT, with nothing
// appended, for 2 GiB or more (protobuf cannot frame it).
absl::StatusOr<uint8_t*> AppendCommandFrame(size_t size, std::string* out) {
  using google::protobuf::io::CodedOutputStream;
  constexpr uint32_t kTag = (v1::SessionRequest::kCommandsFieldNumber << 3) | 2;
  if (size > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrCat("command of ", size, " bytes: over the 2 GiB a request can carry"));
  }
  const size_t framed = CodedOutputStream::VarintSize32(kTag) +
                        CodedOutputStream::VarintSize32(static_cast<uint32_t>(size)) + size;
  const size_t at = out->size();
  out->resize(at + framed);
  uint8_t* p = reinterpret_cast<uint8_t*>(out->data() + at);
  p = CodedOutputStream::WriteVarint32ToArray(kTag, p);
  return CodedOutputStream::WriteVarint32ToArray(static_cast<uint32_t>(size), p);
}

}  // namespace

absl::Status AppendSerializedCommand(const v1::Command& command, std::string* out) {
  ASSIGN_OR_RETURN(uint8_t* const p, AppendCommandFrame(command.ByteSizeLong(), out));
  command.SerializeWithCachedSizesToArray(p);
  return absl::OkStatus();
}

absl::Status AppendSerializedCommandBytes(absl::string_view command, uint64_t seq,
                                          std::string* out) {
  using google::protobuf::io::CodedOutputStream;
  constexpr uint32_t kSeqTag = (v1::Command::kSeqFieldNumber << 3) | 0;
  const size_t size = command.size() + CodedOutputStream::VarintSize32(kSeqTag) +
                      CodedOutputStream::VarintSize64(seq);
  ASSIGN_OR_RETURN(uint8_t * p, AppendCommandFrame(size, out));
  if (!command.empty()) std::memcpy(p, command.data(), command.size());
  p += command.size();
  p = CodedOutputStream::WriteVarint32ToArray(kSeqTag, p);
  CodedOutputStream::WriteVarint64ToArray(seq, p);
  return absl::OkStatus();
}

namespace {

const char* SessionMethodName() {
  static const std::string* const name =
      new std::string(absl::StrCat("/", v1::SessionStream::service_full_name(), "/Session"));
  return name->c_str();
}

// The generated stub's bidirectional call, with bytes for requests: what
// SessionStream::Stub::Session creates, with grpc::ByteBuffer (gRPC's own generic message type)
// in place of SessionRequest.
class GrpcSessionWire final : public SessionWire {
 public:
  explicit GrpcSessionWire(const std::shared_ptr<grpc::Channel>& channel)
      : channel_(channel),
        method_(SessionMethodName(), grpc::internal::RpcMethod::BIDI_STREAMING, channel),
        stream_(grpc::internal::ClientReaderWriterFactory<
                grpc::ByteBuffer, v1::SessionResponse>::Create(channel_.get(), method_,
                                                               &context_)) {}

  bool Write(const v1::SessionRequest& request) override {
    std::string bytes;
    if (!request.SerializeToString(&bytes)) return false;
    return WriteSerialized(bytes);
  }
  bool WriteSerialized(absl::string_view request) override {
    grpc::Slice slice(request.data(), request.size());
    grpc::ByteBuffer buffer(&slice, 1);
    return stream_->Write(buffer);
  }
  bool Read(v1::SessionResponse* response) override { return stream_->Read(response); }
  void WritesDone() override { stream_->WritesDone(); }
  absl::Status Finish() override { return FromGrpcStatus(stream_->Finish(), "SessionStream"); }
  void Cancel() override { context_.TryCancel(); }

 private:
  std::shared_ptr<grpc::Channel> channel_;  // The call uses it (as the generated stub keeps it).
  grpc::ClientContext context_;
  grpc::internal::RpcMethod method_;
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, v1::SessionResponse>> stream_;
};

}  // namespace

std::unique_ptr<SessionWire> MakeGrpcSessionWire(const std::shared_ptr<grpc::Channel>& channel) {
  return std::make_unique<GrpcSessionWire>(channel);
}

}  // namespace cubed
