#include "server/service/status_conversion.h"

#include <string>

namespace cubed {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const int code = static_cast<int>(status.code());
  // Codes beyond gRPC's range (none today) would be a bug; report them as UNKNOWN.
  const grpc::StatusCode grpc_code = code > 0 && code <= grpc::StatusCode::UNAUTHENTICATED
                                         ? static_cast<grpc::StatusCode>(code)
                                         : grpc::StatusCode::UNKNOWN;
  return grpc::Status(grpc_code, std::string(status.message()));
}

}  // namespace cubed
