// Client::NewStreamId, SendStreamCommand, StreamResumes, StreamResuming, CancelStream and
// CallUnary: the
// session stream one command at a time, and unary calls as bytes, for SDKs of other languages
// (client/c_api).

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/async_call.h"
#include "client/client.h"
#include "client/client_impl.h"
#include "client/status_conversion.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"

namespace cubed {

absl::StatusOr<uint64_t> Client::NewStreamId() {
  if (impl_->stream == nullptr) {
    return absl::FailedPreconditionError("client ids: the session stream only (unary transport)");
  }
  return impl_->stream->NextId();
}

absl::Status Client::SendStreamCommand(v1::Command command, StreamReplyCallback on_reply) {
  return SendStreamCommandInPlace(command, std::move(on_reply));
}

absl::Status Client::SendStreamCommandInPlace(v1::Command& command, StreamReplyCallback on_reply) {
  if (impl_->stream == nullptr) {
    return absl::FailedPreconditionError(
        "stream commands: the session stream only (unary transport)");
  }
  return impl_->stream->SendInPlace(command, std::move(on_reply));
}

absl::Status Client::SendStreamSerialized(absl::string_view command) {
  if (impl_->stream == nullptr) {
    return absl::FailedPreconditionError(
        "stream commands: the session stream only (unary transport)");
  }
  return impl_->stream->SendSerialized(command);
}

absl::StatusOr<std::string> Client::CallUnary(absl::string_view method, absl::string_view request) {
  grpc::GenericStub stub(impl_->channel);
  grpc::ClientContext context;
  SetDeadline(&context, impl_->options.timeout);
  grpc::Slice slice(request.data(), request.size());
  const grpc::ByteBuffer in(&slice, 1);
  grpc::CompletionQueue queue;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> call =
      stub.PrepareUnaryCall(&context, std::string(method), in, &queue);
  if (call == nullptr) return absl::InternalError(absl::StrCat(method, ": no call"));
  call->StartCall();
  grpc::ByteBuffer out;
  grpc::Status status;
  int tag = 0;
  call->Finish(&out, &status, &tag);
  void* got = nullptr;
  bool ok = false;
  if (!queue.Next(&got, &ok) || got != &tag) {
    return absl::InternalError(absl::StrCat(method, ": the call did not complete"));
  }
  queue.Shutdown();
  while (queue.Next(&got, &ok)) {
  }
  if (!status.ok()) return FromGrpcStatus(status, method);
  std::vector<grpc::Slice> slices;
  if (!out.Dump(&slices).ok()) return absl::InternalError(absl::StrCat(method, ": bad response"));
  std::string bytes;
  bytes.reserve(out.Length());
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return bytes;
}

void Client::CancelStream() {
  if (impl_->stream != nullptr) impl_->stream->Cancel();
}

uint64_t Client::StreamResumes() const {
  return impl_->stream == nullptr ? 0 : impl_->stream->resume_state().resumes;
}

bool Client::StreamResuming() const {
  return impl_->stream != nullptr && impl_->stream->resume_state().resuming;
}

}  // namespace cubed
