#pragma once

// The one place where absl::Status becomes grpc::Status (CONVENTIONS.md §3).

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace cubed {

// Same code (the numbering is shared), same message. An OK status maps to grpc::Status::OK.
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace cubed
