// cubectl top: the daemon's load, sampled like `nvidia-smi dmon`. Every --interval it calls
// GetStats and prints one line per device: the device's gauges (sessions, handles, queued tasks,
// memory) and the daemon's rates since the previous sample (kernel launches, commands and bytes
// per second, from the cumulative counters; GetStats calls, top's own, left out). Those rates are
// daemon-wide: GetStats counts calls by method, not by device. With --sessions each device line
// is followed by one line per open session (its serial, principal, handles, bytes and kernels
// per second, from the session's own launch counter). Imported memory (ImportMemory: other
// processes' memory that handles map, never in the pools' figures) has a column of its own. A
// header line comes first and again every 20 samples.

#include <algorithm>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/cubectl/commands.h"
#include "client/cubectl/output.h"
#include "client/status_conversion.h"
#include "common/status_macros.h"
#include "cubed/v1/compute.grpc.pb.h"

namespace cubed::cubectl {
namespace {

constexpr int kHeaderEvery = 20;

// The daemon's cumulative counters at one sample.
struct Counters {
  uint64_t kernels = 0;  // Execute calls and stream "execute" commands that succeeded.
  // Every finished call and stream command, whatever its status, but GetStats (top's own).
  uint64_t commands = 0;
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
};

uint64_t Count(const google::protobuf::RepeatedPtrField<v1::CodeCount>& codes, bool ok_only) {
  uint64_t n = 0;
  for (const v1::CodeCount& c : codes) {
    if (!ok_only || c.code() == "OK") n += c.count();
  }
  return n;
}

Counters Sum(const v1::GetStatsResponse& stats) {
  Counters c;
  for (const v1::MethodStats& m : stats.methods()) {
    if (m.method() == "GetStats") continue;  // top's own calls.
    if (m.method() == "Execute") c.kernels += Count(m.codes(), /*ok_only=*/true);
    // A session stream's call is counted by its commands.
    if (m.method() != "Session") c.commands += Count(m.codes(), /*ok_only=*/false);
    c.bytes_in += m.bytes_received();
    c.bytes_out += m.bytes_sent();
  }
  for (const v1::StreamCommandStats& k : stats.stream_commands()) {
    if (k.kind() == "execute") c.kernels += Count(k.codes(), /*ok_only=*/true);
    c.commands += Count(k.codes(), /*ok_only=*/false);
  }
  return c;
}

// Per second over `seconds`; a counter that went back (the daemon restarted) counts from zero.
double Rate(uint64_t now, uint64_t before, double seconds) {
  const uint64_t delta = now >= before ? now - before : now;
  return seconds > 0 ? static_cast<double>(delta) / seconds : 0;
}

absl::StatusOr<v1::GetStatsResponse> Sample(const Context& ctx, v1::Compute::Stub& stub) {
  grpc::ClientContext context;
  SetDeadline(ctx.global, &context);
  v1::GetStatsResponse stats;
  RETURN_IF_ERROR(
      FromGrpcStatus(stub.GetStats(&context, v1::GetStatsRequest(), &stats), "GetStats"));
  return stats;
}

struct Rates {
  double kernels, commands, bytes_in, bytes_out;
};

// Sessions' launch counters at one sample, by (device, serial).
using SessionKernels = absl::flat_hash_map<std::pair<uint32_t, uint64_t>, uint64_t>;

SessionKernels KernelsBySession(const v1::GetStatsResponse& stats) {
  SessionKernels out;
  for (const v1::DeviceStats& d : stats.devices()) {
    for (const v1::SessionStats& s : d.session_stats()) out[{d.device(), s.serial()}] = s.kernels();
  }
  return out;
}

// Kernels per second of session `s` of device `device` since `before` (a session that opened
// since counts from zero).
double SessionRate(const SessionKernels& before, uint32_t device, const v1::SessionStats& s,
                   double seconds) {
  auto it = before.find({device, s.serial()});
  return Rate(s.kernels(), it == before.end() ? 0 : it->second, seconds);
}

void PrintSessions(const v1::DeviceStats& d, const SessionKernels& before, double seconds,
                   std::ostream& out) {
  for (const v1::SessionStats& s : d.session_stats()) {
    out << absl::StrFormat(
        "%-8s %3s %8s %8d %6s %10s %10s %10s %10s %9.1f  %s\n", "", absl::StrCat("#", s.serial()),
        "", s.handles(), "", HumanSize(s.bytes()), "", "", HumanSize(s.imported_bytes()),
        SessionRate(before, d.device(), s, seconds), s.principal().empty() ? "-" : s.principal());
  }
}

void PrintTable(const v1::GetStatsResponse& stats, const Rates& r, bool header,
                const SessionKernels* sessions_before, double seconds, std::ostream& out) {
  if (header) {
    out << absl::StrFormat("%-8s %3s %8s %8s %6s %10s %10s %10s %10s %9s %9s %10s %10s\n", "# time",
                           "dev", "sessions", "handles", "queued", "in_use", "reserved", "limit",
                           "imported", "kernels/s", "cmds/s", "in/s", "out/s");
  }
  const std::string time = absl::FormatTime("%H:%M:%S", absl::Now(), absl::LocalTimeZone());
  for (const v1::DeviceStats& d : stats.devices()) {
    out << absl::StrFormat("%-8s %3d %8d %8d %6d %10s %10s %10s %10s %9.1f %9.1f %10s %10s\n", time,
                           d.device(), d.sessions(), d.handles(), d.queued_tasks(),
                           HumanSize(d.memory().bytes_in_use()),
                           HumanSize(d.memory().bytes_reserved()), HumanSize(d.memory_limit()),
                           HumanSize(d.imported_bytes()), r.kernels, r.commands,
                           HumanSize(static_cast<uint64_t>(r.bytes_in)),
                           HumanSize(static_cast<uint64_t>(r.bytes_out)));
    if (sessions_before != nullptr) PrintSessions(d, *sessions_before, seconds, out);
  }
}

// One JSON object: the sample's time, the rates and the devices' gauges.
void PrintJson(const v1::GetStatsResponse& stats, const Rates& r, absl::Duration interval,
               const SessionKernels* sessions_before, std::ostream& out) {
  std::vector<std::string> devices;
  const double seconds = absl::ToDoubleSeconds(interval);
  for (const v1::DeviceStats& d : stats.devices()) {
    std::string sessions;
    if (sessions_before != nullptr) {
      std::vector<std::string> each;
      for (const v1::SessionStats& s : d.session_stats()) {
        each.push_back(absl::StrFormat(
            "{\"serial\": %d, \"principal\": %s, \"handles\": %d, \"bytes\": %d, "
            "\"imported_bytes\": %d, \"kernels\": %d, \"kernels_per_s\": %.3f, \"age_ns\": %d}",
            s.serial(), JsonQuote(s.principal()), s.handles(), s.bytes(), s.imported_bytes(),
            s.kernels(), SessionRate(*sessions_before, d.device(), s, seconds), s.age_us() * 1000));
      }
      sessions = absl::StrCat(", \"session_list\": [", absl::StrJoin(each, ", "), "]");
    }
    devices.push_back(
        absl::StrFormat("{\"device\": %d, \"sessions\": %d, \"handles\": %d, \"queued_tasks\": %d, "
                        "\"bytes_in_use\": %d, \"bytes_reserved\": %d, \"memory_limit\": %d, "
                        "\"imported_bytes\": %d, \"imported_buffers\": %d%s}",
                        d.device(), d.sessions(), d.handles(), d.queued_tasks(),
                        d.memory().bytes_in_use(), d.memory().bytes_reserved(), d.memory_limit(),
                        d.imported_bytes(), d.imported_buffers(), sessions));
  }
  out << absl::StrFormat(
      "{\"time\": %s, \"interval_ns\": %d, \"kernels_per_s\": %.3f, \"commands_per_s\": %.3f, "
      "\"bytes_in_per_s\": %.0f, \"bytes_out_per_s\": %.0f, \"devices\": [%s]}\n",
      JsonQuote(absl::FormatTime("%Y-%m-%d%ET%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone())),
      absl::ToInt64Nanoseconds(interval), r.kernels, r.commands, r.bytes_in, r.bytes_out,
      absl::StrJoin(devices, ", "));
}

}  // namespace

absl::Status TopCommand(const Context& ctx) {
  uint64_t count = 0;
  if (auto text = ctx.args.Get("count")) {
    ASSIGN_OR_RETURN(count, ParseUint("--count", *text));
  }
  absl::Duration interval = absl::Seconds(1);
  if (auto text = ctx.args.Get("interval")) {
    ASSIGN_OR_RETURN(interval, ParseDurationFlag("--interval", *text));
    if (interval < absl::Milliseconds(10)) {
      return UsageError("--interval: must be at least 10ms");
    }
  }
  const bool per_session = ctx.args.Has("sessions");
  auto stub = v1::Compute::NewStub(OpenChannel(ctx.global));
  ASSIGN_OR_RETURN(v1::GetStatsResponse before, Sample(ctx, *stub));
  absl::Time before_time = absl::Now();
  for (uint64_t i = 0; count == 0 || i < count; ++i) {
    absl::SleepFor(interval);
    ASSIGN_OR_RETURN(v1::GetStatsResponse now, Sample(ctx, *stub));
    const absl::Time now_time = absl::Now();
    const double seconds = absl::ToDoubleSeconds(now_time - before_time);
    const Counters a = Sum(before), b = Sum(now);
    const Rates rates{Rate(b.kernels, a.kernels, seconds), Rate(b.commands, a.commands, seconds),
                      Rate(b.bytes_in, a.bytes_in, seconds),
                      Rate(b.bytes_out, a.bytes_out, seconds)};
    const SessionKernels sessions_before = KernelsBySession(before);
    const SessionKernels* by_session = per_session ? &sessions_before : nullptr;
    if (ctx.global.json) {
      PrintJson(now, rates, now_time - before_time, by_session, *ctx.out);
    } else {
      PrintTable(now, rates, i % kHeaderEvery == 0, by_session, seconds, *ctx.out);
    }
    ctx.out->flush();
    before = std::move(now);
    before_time = now_time;
  }
  return absl::OkStatus();
}

}  // namespace cubed::cubectl
