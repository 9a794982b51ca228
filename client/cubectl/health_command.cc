// cubectl health: grpc.health.v1 Check of the whole server (""), of cubed.v1.Compute, and of
// each device ("device/0", ... until the daemon answers NOT_FOUND; docs/operations.md, "Several
// devices"). Fails when the server or cubed.v1.Compute does not serve; a lost device alone is
// reported, not a failure (the daemon serves on its other devices).

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cubectl/commands.h"
#include "client/cubectl/output.h"
#include "client/status_conversion.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace cubed::cubectl {

absl::Status HealthCommand(const Context& ctx) {
  using grpc::health::v1::HealthCheckRequest;
  using grpc::health::v1::HealthCheckResponse;
  auto stub = grpc::health::v1::Health::NewStub(OpenChannel(ctx.global));
  std::vector<Field> fields;
  std::vector<std::string> not_serving;
  std::vector<std::string> services = {"", "cubed.v1.Compute"};
  constexpr int kMostDevices = 16;  // server/daemon/config.h's kMaxDevices.
  for (int i = 0; i < 2 + kMostDevices && i < static_cast<int>(services.size()); ++i) {
    const std::string service = services[i];  // A copy: the loop appends to services.
    const bool device = i >= 2;
    HealthCheckRequest request;
    request.set_service(service);
    HealthCheckResponse response;
    grpc::ClientContext context;
    SetDeadline(ctx.global, &context);
    grpc::Status status = stub->Check(&context, request, &response);
    std::string state;
    if (status.ok()) {
      state = HealthCheckResponse::ServingStatus_Name(response.status());
    } else if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
      if (device) break;          // Past the last device (or a daemon without per-device names).
      state = "SERVICE_UNKNOWN";  // What Watch would report for a service the server lacks.
    } else {
      return FromGrpcStatus(status, "Health.Check");
    }
    const std::string name = service.empty() ? "server" : service;
    if (state != "SERVING" && !device) not_serving.push_back(absl::StrCat(name, " is ", state));
    fields.push_back(TextField(name, state));
    if (i >= 1) services.push_back(absl::StrCat("device/", i - 1));
  }
  PrintReport(fields, ctx.global.json, *ctx.out);
  if (!not_serving.empty()) return absl::UnavailableError(absl::StrJoin(not_serving, ", "));
  return absl::OkStatus();
}

}  // namespace cubed::cubectl
