// cubectl stats: the daemon's counters and gauges (GetStats), the same numbers as its Prometheus
// endpoint. A table of what moved for people; with --json the whole GetStatsResponse in
// protobuf's JSON mapping (field names as in compute.proto; 64-bit numbers as strings).

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cubectl/commands.h"
#include "client/cubectl/output.h"
#include "client/status_conversion.h"
#include "cubed/v1/compute.grpc.pb.h"
#include "google/protobuf/util/json_util.h"

namespace cubed::cubectl {
namespace {

// "OK 3, NOT_FOUND 1"; empty when nothing was counted.
std::string Codes(const google::protobuf::RepeatedPtrField<v1::CodeCount>& codes) {
  std::vector<std::string> parts;
  for (const v1::CodeCount& c : codes) parts.push_back(absl::StrCat(c.code(), " ", c.count()));
  return absl::StrJoin(parts, ", ");
}

std::string Mean(const v1::LatencyHistogram& h) {
  if (h.count() == 0) return "-";
  return absl::StrCat(h.sum_us() / h.count(), " µs");
}

std::string Latencies(const v1::LatencyHistogram& queue, const v1::LatencyHistogram& execution) {
  return absl::StrCat("queue mean ", Mean(queue), ", execution mean ", Mean(execution));
}

}  // namespace

absl::Status StatsCommand(const Context& ctx) {
  auto stub = v1::Compute::NewStub(OpenChannel(ctx.global));
  grpc::ClientContext context;
  SetDeadline(ctx.global, &context);
  v1::GetStatsResponse stats;
  grpc::Status status = stub->GetStats(&context, v1::GetStatsRequest(), &stats);
  if (!status.ok()) return FromGrpcStatus(status, "GetStats");
  if (ctx.global.json) {
    google::protobuf::util::JsonPrintOptions options;
    options.preserve_proto_field_names = true;
    options.always_print_primitive_fields = true;
    std::string json;
    if (!google::protobuf::util::MessageToJsonString(stats, &json, options).ok()) {
      return absl::InternalError("GetStats: the answer cannot be printed as JSON");
    }
    *ctx.out << json << "\n";
    return absl::OkStatus();
  }
  std::vector<Field> fields = {
      TextField("uptime", absl::FormatDuration(absl::Microseconds(stats.uptime_us()))),
      NumberField("open_streams", stats.open_streams()),
      NumberField("open_rings", stats.open_rings()),
      NumberField("rings_opened", stats.rings_opened())};
  for (const v1::DeviceStats& d : stats.devices()) {
    const std::string device = absl::StrCat("device ", d.device(), " ");
    const v1::MemoryUsage& m = d.memory();
    // docs/operations.md, "Several devices": calls on it fail UNAVAILABLE, the others serve.
    if (d.lost()) fields.push_back(TextField(device + "state", "LOST"));
    fields.push_back(TextField(
        device + "memory",
        absl::StrCat(m.number_allocs(), " allocations, ", HumanSize(m.bytes_in_use()), " in use, ",
                     HumanSize(m.bytes_padding()), " padding, ", HumanSize(m.bytes_reserved()),
                     " reserved of ", HumanSize(d.memory_limit()), " limit")));
    // Other processes' memory that handles map (ImportMemory): never in the figures above.
    fields.push_back(TextField(
        device + "imported",
        absl::StrCat(HumanSize(d.imported_bytes()), " in ", d.imported_buffers(), " imports")));
    fields.push_back(
        TextField(device + "sessions", absl::StrCat(d.sessions(), " (", d.handles(), " handles), ",
                                                    d.queued_tasks(), " tasks queued")));
    const v1::KernelCacheStats& k = d.kernel_cache();
    fields.push_back(
        TextField(device + "kernel_cache",
                  absl::StrCat(k.hits(), " hits, ", k.misses(), " misses, ", k.disk_hits(),
                               " disk hits, ", k.compile_time_us(), " µs compiling")));
    fields.push_back(TextField(
        device + "launches",
        absl::StrCat(d.batched_launches(), " batched in ", d.launch_batches(), " graph replays")));
  }
  for (const v1::MethodStats& m : stats.methods()) {
    if (m.codes().empty()) continue;
    fields.push_back(TextField(
        m.method(),
        absl::StrCat(Codes(m.codes()), "; ", Latencies(m.queue(), m.execution()), "; ",
                     HumanSize(m.bytes_received()), " in, ", HumanSize(m.bytes_sent()), " out")));
  }
  for (const v1::StreamCommandStats& k : stats.stream_commands()) {
    if (k.codes().empty()) continue;
    fields.push_back(
        TextField(absl::StrCat("stream ", k.kind()),
                  absl::StrCat(Codes(k.codes()), "; ", Latencies(k.queue(), k.execution()))));
  }
  PrintReport(fields, /*json=*/false, *ctx.out);
  return absl::OkStatus();
}

}  // namespace cubed::cubectl
