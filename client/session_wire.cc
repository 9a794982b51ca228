#include "client/session_wire.h"

#include "client/status_conversion.h"

namespace cubed {

absl::Status GrpcSessionWire::Finish() {
  return FromGrpcStatus(stream_->Finish(), "SessionStream");
}

}  // namespace cubed
