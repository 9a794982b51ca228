// cubectl session open / close: sessions that outlive the cubectl process, so later invocations
// can join them with --session=ID. The SDK closes the sessions it opens, so these use the raw
// Compute stub.

#include "absl/strings/str_cat.h"
#include "client/cubectl/commands.h"
#include "client/cubectl/output.h"
#include "client/status_conversion.h"
#include "common/status_macros.h"
#include "cubed/v1/compute.grpc.pb.h"

namespace cubed::cubectl {

absl::Status SessionOpenCommand(const Context& ctx) {
  absl::Duration lease = absl::Minutes(10);
  if (auto text = ctx.args.Get("lease")) {
    ASSIGN_OR_RETURN(lease, ParseDurationFlag("--lease", *text));
  }
  auto stub = v1::Compute::NewStub(OpenChannel(ctx.global));
  v1::OpenSessionRequest request;
  request.set_lease_ms(absl::ToInt64Milliseconds(lease));
  v1::OpenSessionResponse response;
  grpc::ClientContext context;
  SetDeadline(ctx.global, &context);
  RETURN_IF_ERROR(FromGrpcStatus(stub->OpenSession(&context, request, &response), "OpenSession"));
  PrintReport({IdField("session", response.session()),
               DurationField("lease", absl::Milliseconds(response.lease_ms()))},
              ctx.global.json, *ctx.out);
  return absl::OkStatus();
}

absl::Status SessionCloseCommand(const Context& ctx) {
  const auto& words = ctx.args.positional();
  uint64_t session = ctx.global.session;
  if (words.size() == 3) {
    ASSIGN_OR_RETURN(session, ParseUint("session id", words[2]));
  } else if (words.size() > 3 || session == 0) {
    return UsageError("usage: cubectl session close ID");
  }
  auto stub = v1::Compute::NewStub(OpenChannel(ctx.global));
  v1::CloseSessionRequest request;
  request.set_session(session);
  v1::CloseSessionResponse response;
  grpc::ClientContext context;
  SetDeadline(ctx.global, &context);
  RETURN_IF_ERROR(FromGrpcStatus(stub->CloseSession(&context, request, &response), "CloseSession"));
  PrintReport(
      {IdField("session", session), NumberField("handles_released", response.handles_released())},
      ctx.global.json, *ctx.out);
  return absl::OkStatus();
}

}  // namespace cubed::cubectl
