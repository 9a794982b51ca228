// cubectl drain: stops the daemon for a restart or an upgrade (the Drain RPC; docs/operations.md,
// "Drain"). With --checkpoint the daemon first writes every session to its --checkpoint_dir, so
// that a daemon started with --restore brings them back; the report says what was written.

#include <vector>

#include "client/cubectl/commands.h"
#include "client/cubectl/output.h"
#include "client/status_conversion.h"
#include "cubed/v1/compute.grpc.pb.h"

namespace cubed::cubectl {

absl::Status DrainCommand(const Context& ctx) {
  auto stub = v1::Compute::NewStub(OpenChannel(ctx.global));
  grpc::ClientContext context;
  SetDeadline(ctx.global, &context);
  v1::DrainRequest request;
  request.set_checkpoint(ctx.args.Has("checkpoint"));
  v1::DrainResponse response;
  grpc::Status status = stub->Drain(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status, "Drain");
  std::vector<Field> fields = {TextField("drained", "the daemon is stopping")};
  if (request.checkpoint()) {
    fields.push_back(TextField("checkpoint", response.directory()));
    fields.push_back(NumberField("sessions", response.sessions()));
    fields.push_back(NumberField("handles", response.handles()));
    fields.push_back(NumberField("bytes", response.bytes()));
  }
  PrintReport(fields, ctx.global.json, *ctx.out);
  return absl::OkStatus();
}

}  // namespace cubed::cubectl
