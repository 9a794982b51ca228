#include "client/session_wire.h"

#include "client/status_conversion.h"

namespace cubed {

bool SessionWire::WriteCommand(const v1::Command& command) {
  v1::SessionRequest request;
  *request.add_commands() = command;
  return Write(request);
}

absl::Status GrpcSessionWire::Finish() {
  return FromGrpcStatus(stream_->Finish(), "SessionStream");
}

}  // namespace cubed
