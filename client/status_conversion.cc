#include "client/status_conversion.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace cubed {

absl::Status FromGrpcStatus(const grpc::Status& status, absl::string_view rpc) {
  if (status.ok()) return absl::OkStatus();
  const int raw = static_cast<int>(status.error_code());
  // grpc::StatusCode and absl::StatusCode share the canonical numbers 1 .. 16.
  const absl::StatusCode code =
      (raw >= 1 && raw <= 16) ? static_cast<absl::StatusCode>(raw) : absl::StatusCode::kUnknown;
  const std::string& message = status.error_message();
  if (rpc.empty()) return absl::Status(code, message);
  return absl::Status(code, absl::StrCat(rpc, ": ", message));
}

}  // namespace cubed
