#pragma once

// The one place where a gRPC status becomes an absl::Status on the SDK side.

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"

namespace cubed {

// Converts `status` keeping its code (the numeric values of both enums agree; unknown values
// become UNKNOWN) and its message, prefixed by "`rpc`: " when `rpc` is not empty so a failure
// names the call that failed. An OK status gives OkStatus().
absl::Status FromGrpcStatus(const grpc::Status& status, absl::string_view rpc = "");

}  // namespace cubed
