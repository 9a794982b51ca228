// cubectl trace: records what a session runs for a while (a traced profile, Note [Command traces]
// in server/channel/trace_recorder.cc) and writes it as Chrome trace-event JSON, the format
// Perfetto's UI and chrome://tracing open (the Python SDK's Trace.chrome() writes the same).

#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/cubectl/commands.h"
#include "client/cubectl/output.h"
#include "client/status_conversion.h"
#include "client/trace_json.h"
#include "common/status_macros.h"
#include "cubed/v1/compute.grpc.pb.h"

namespace cubed::cubectl {
namespace {

constexpr uint32_t kDefaultMaxEvents = 100000;
constexpr uint32_t kMaxEvents = 1000000;  // The daemon's bound (Device::kMaxTraceEvents).

}  // namespace

absl::Status TraceCommand(const Context& ctx) {
  if (ctx.global.session == 0 || ctx.args.positional().size() != 1) {
    return UsageError("usage: cubectl trace --session=ID [--for=10s] [--max-events=N] [-o FILE]");
  }
  absl::Duration span = absl::Seconds(10);
  if (auto text = ctx.args.Get("for")) {
    ASSIGN_OR_RETURN(span, ParseDurationFlag("--for", *text));
  }
  uint64_t max_events = kDefaultMaxEvents;
  if (auto text = ctx.args.Get("max-events")) {
    ASSIGN_OR_RETURN(max_events, ParseUint("--max-events", *text));
    if (max_events == 0 || max_events > kMaxEvents) {
      return UsageError(
          absl::StrCat("--max-events: ", max_events, " is outside 1 .. ", kMaxEvents));
    }
  }
  auto stub = v1::Compute::NewStub(OpenChannel(ctx.global));
  {
    v1::StartProfileRequest request;
    request.set_session(ctx.global.session);
    request.set_trace_events(static_cast<uint32_t>(max_events));
    v1::StartProfileResponse response;
    grpc::ClientContext context;
    SetDeadline(ctx.global, &context);
    RETURN_IF_ERROR(
        FromGrpcStatus(stub->StartProfile(&context, request, &response), "StartProfile"));
  }
  absl::SleepFor(span);
  v1::EndProfileRequest request;
  request.set_session(ctx.global.session);
  v1::EndProfileResponse response;
  grpc::ClientContext context;
  SetDeadline(ctx.global, &context);
  RETURN_IF_ERROR(FromGrpcStatus(stub->EndProfile(&context, request, &response), "EndProfile"));
  const std::string json =
      ChromeTraceJson(response.trace(), ctx.global.session, response.duration_ns());
  const auto path = ctx.args.Get("o");
  if (!path) {
    *ctx.out << json;
    return absl::OkStatus();
  }
  std::ofstream file(std::string(*path), std::ios::binary);
  file << json;
  file.close();
  if (!file) return absl::UnavailableError(absl::StrCat("cannot write ", *path));
  PrintReport({IdField("session", ctx.global.session),
               NumberField("events", static_cast<uint64_t>(response.trace().events_size())),
               NumberField("dropped", response.trace().dropped()),
               DurationField("device_time", absl::Nanoseconds(response.duration_ns())),
               RawField("file", std::string(*path), JsonQuote(*path))},
              ctx.global.json, *ctx.out);
  return absl::OkStatus();
}

}  // namespace cubed::cubectl
