#pragma once

// The session stream's commands from their wire form (cubed.v1.Command) to StreamCommand
// (server/channel/stream_command.h), checked as the unary RPCs check theirs.

#include "cubed/v1/session.pb.h"
#include "server/channel/stream_command.h"
#include "server/service/request_conversion.h"

namespace cubed {

// Converts `command` into `out`, a default-constructed StreamCommand (converted where it lives:
// a batch's, with no move), moving the command's payload out (the message is left unspecified).
// Never fails: errors land in `out.invalid`. Pure; any thread.
void ToStreamCommand(v1::Command& command, const RequestLimits& limits, StreamCommand& out);

}  // namespace cubed
