// Client::NewStreamId and Client::SendStreamCommand: the session stream, one command at a time,
// for SDKs of other languages (client/c_api).

#include <utility>

#include "absl/status/status.h"
#include "client/client.h"
#include "client/client_impl.h"

namespace cubed {

absl::StatusOr<uint64_t> Client::NewStreamId() {
  if (impl_->stream == nullptr) {
    return absl::FailedPreconditionError("client ids: the session stream only (unary transport)");
  }
  return impl_->stream->NextId();
}

absl::Status Client::SendStreamCommand(v1::Command command, StreamReplyCallback on_reply) {
  if (impl_->stream == nullptr) {
    return absl::FailedPreconditionError(
        "stream commands: the session stream only (unary transport)");
  }
  return impl_->stream->Send(std::move(command), std::move(on_reply));
}

}  // namespace cubed
