#include "tests/bench/cpu/rpc_latency.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/client.h"
#include "cubed/v1/compute.grpc.pb.h"
#include "echo.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace cubed::cpubench {
namespace {

using Clock = std::chrono::steady_clock;
using Call = std::function<absl::Status()>;

std::chrono::system_clock::time_point Deadline() {
  return std::chrono::system_clock::now() + std::chrono::seconds(10);
}

absl::Status FromGrpc(const grpc::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(what, " failed: ", s.error_message()));
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[(v.size() - 1) / 2];
}

// all[i]: every sample of path i; rounds[i]: its per-round medians.
struct PathSamples {
  std::vector<double> all;
  std::vector<double> round_medians;
};

Summary SummaryOf(const PathSamples& p) {
  Summary s = Summarize(p.all);
  Summary r = Summarize(p.round_medians);
  s.min = r.min;
  s.max = r.max;
  return s;
}

Row MakeRow(const std::string& transport, const std::string& name, const PathSamples& figure,
            const PathSamples& echo) {
  Row row;
  row.id = "P1";
  row.lower_is_better = true;
  row.name = absl::StrCat(name, " (", transport, ")");
  row.unit = "us";
  row.show_p99 = true;
  row.figure = SummaryOf(figure);
  row.baseline_name = absl::StrCat("bare gRPC echo, child process (", transport, ")");
  row.baseline = SummaryOf(echo);
  row.goal = "<= 1.2x p50";
  double ratio = row.Ratio();
  row.goal_met = ratio > 0 && ratio <= 1.2;
  row.verdict = row.goal_met ? "met" : absl::StrFormat("missed (%.2fx > 1.2x)", ratio);
  row.note = absl::StrFormat("p99 ratio %.2fx; bracket = range of %d per-round medians",
                             echo.all.empty() ? 0.0 : row.figure.p99 / row.baseline.p99,
                             static_cast<int>(figure.round_medians.size()));
  return row;
}

}  // namespace

absl::StatusOr<std::vector<Row>> MeasureTinyUnary(const std::string& transport,
                                                  const std::string& daemon_address,
                                                  const std::string& echo_address,
                                                  const LatencyOptions& options) {
  auto echo_stub = cubed_bench::Echo::NewStub(
      grpc::CreateChannel(echo_address, grpc::InsecureChannelCredentials()));
  auto compute_stub =
      v1::Compute::NewStub(grpc::CreateChannel(daemon_address, grpc::InsecureChannelCredentials()));
  ClientOptions client_options;
  client_options.address = daemon_address;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(client_options);
  if (!client.ok()) return client.status();

  cubed_bench::EchoMessage echo_request;
  echo_request.set_data(std::string(16, 'e'));  // About the size of a MemoryUsageResponse.
  std::vector<Call> calls = {
      [&]() {
        grpc::ClientContext ctx;
        ctx.set_deadline(Deadline());
        cubed_bench::EchoMessage reply;
        return FromGrpc(echo_stub->Echo(&ctx, echo_request, &reply), "Echo");
      },
      [&]() {
        grpc::ClientContext ctx;
        ctx.set_deadline(Deadline());
        v1::MemoryUsageRequest req;
        v1::MemoryUsageResponse reply;
        return FromGrpc(compute_stub->MemoryUsage(&ctx, req, &reply), "MemoryUsage");
      },
      [&]() { return (*client)->GetMemoryUsage().status(); },
      [&]() {
        grpc::ClientContext ctx;
        ctx.set_deadline(Deadline());
        cubed_bench::EchoMessage reply;
        return FromGrpc(echo_stub->EchoViaThread(&ctx, echo_request, &reply), "EchoViaThread");
      },
  };

  for (const Call& call : calls) {
    for (int i = 0; i < options.warmup_calls; ++i) {
      absl::Status s = call();
      if (!s.ok()) return s;
    }
  }
  std::vector<PathSamples> samples(calls.size());
  std::vector<double> round;
  for (int r = 0; r < options.rounds; ++r) {
    for (size_t k = 0; k < calls.size(); ++k) {
      size_t path = (k + static_cast<size_t>(r)) % calls.size();  // Rotate the order.
      round.clear();
      for (int i = 0; i < options.calls_per_round; ++i) {
        Clock::time_point t0 = Clock::now();
        absl::Status s = calls[path]();
        Clock::time_point t1 = Clock::now();
        if (!s.ok()) return s;
        round.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      }
      samples[path].all.insert(samples[path].all.end(), round.begin(), round.end());
      samples[path].round_medians.push_back(Median(round));
    }
  }
  Row hop = MakeRow(transport, "diagnostic: bare echo answered from a 2nd thread", samples[3],
                    samples[0]);
  hop.id = "P1*";
  hop.goal = "(diagnostic)";
  hop.goal_met = true;
  hop.verdict = "reported";
  hop.note = absl::StrCat("what one thread hop costs (MemoryUsage is posted to the device loop); ",
                          hop.note);
  return std::vector<Row>{
      MakeRow(transport, "MemoryUsage, raw sync stub", samples[1], samples[0]),
      MakeRow(transport, "MemoryUsage, SDK Client::GetMemoryUsage", samples[2], samples[0]), hop};
}

}  // namespace cubed::cpubench
