// cubectl health: grpc.health.v1 Check of the whole server ("") and of cubed.v1.Compute.

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
  for (const char* service : {"", "cubed.v1.Compute"}) {
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
      state = "SERVICE_UNKNOWN";  // What Watch would report for a service the server lacks.
    } else {
      return FromGrpcStatus(status, "Health.Check");
    }
    const std::string name = *service == '\0' ? "server" : service;
    if (state != "SERVING") not_serving.push_back(absl::StrCat(name, " is ", state));
    fields.push_back(TextField(name, state));
  }
  PrintReport(fields, ctx.global.json, *ctx.out);
  if (!not_serving.empty()) return absl::UnavailableError(absl::StrJoin(not_serving, ", "));
  return absl::OkStatus();
}

}  // namespace cubed::cubectl
