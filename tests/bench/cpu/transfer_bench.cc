#include "tests/bench/cpu/transfer_bench.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/client.h"
#include "common/status_macros.h"
#include "echo.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tests/bench/cpu/baseline_child.h"

namespace cubed::cpubench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string RandomBytes(uint64_t n) {
  std::string data(n, '\0');
  std::mt19937_64 rng(7);
  for (uint64_t i = 0; i + 8 <= n; i += 8) {
    uint64_t v = rng();
    std::memcpy(&data[i], &v, 8);
  }
  return data;
}

struct SdkTimes {
  double create_s = 0;
  double read_s = 0;
};

absl::StatusOr<SdkTimes> SdkRoundTrip(Client& client, const std::string& data, bool verify) {
  SdkTimes t;
  Clock::time_point t0 = Clock::now();
  ASSIGN_OR_RETURN(Handle h, client.Create(absl::MakeConstSpan(
                                 reinterpret_cast<const uint8_t*>(data.data()), data.size())));
  Clock::time_point t1 = Clock::now();
  ASSIGN_OR_RETURN(std::vector<std::string> back, client.Read({Binding(h)}).get());
  Clock::time_point t2 = Clock::now();
  t.create_s = Seconds(t0, t1);
  t.read_s = Seconds(t1, t2);
  if (verify && (back.size() != 1 || back[0] != data)) {
    return absl::InternalError("the bytes read back differ from the bytes created");
  }
  h = Handle();
  RETURN_IF_ERROR(client.FlushReleases());  // Outside the timing: the next round starts clean.
  return t;
}

}  // namespace

absl::StatusOr<std::vector<Row>> MeasureCreateRead(const std::string& daemon_address,
                                                   const std::string& raw_socket_path,
                                                   const std::string& echo_address,
                                                   const TransferOptions& options) {
  ClientOptions client_options;
  client_options.address = daemon_address;
  client_options.bulk_threshold = 0;    // One message each way; P3 measures the chunked path.
  client_options.region_threshold = 0;  // And P4 shared memory.
  ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Connect(client_options));
  ASSIGN_OR_RETURN(int fd, ConnectUnix(raw_socket_path));
  std::unique_ptr<int, void (*)(int*)> closer(&fd, [](int* f) { close(*f); });

  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(1 << 30);
  args.SetMaxSendMessageSize(1 << 30);
  auto echo = cubed_bench::Echo::NewStub(
      grpc::CreateCustomChannel(echo_address, grpc::InsecureChannelCredentials(), args));

  const std::string data = RandomBytes(options.bytes);
  cubed_bench::EchoMessage request;
  request.set_data(data);
  std::string back;
  const double gib = 2.0 * static_cast<double>(options.bytes) / (1ull << 30);
  std::vector<double> sdk, raw, grpc_echo, create_gibs, read_gibs;
  for (int r = -1; r < options.repetitions; ++r) {  // r = -1 warms both paths up.
    ASSIGN_OR_RETURN(SdkTimes t, SdkRoundTrip(*client, data, r == -1));
    Clock::time_point t0 = Clock::now();
    RETURN_IF_ERROR(RawRoundTrip(fd, data, &back));
    double raw_s = Seconds(t0, Clock::now());
    cubed_bench::EchoMessage reply;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    Clock::time_point t1 = Clock::now();
    grpc::Status echoed = echo->Echo(&ctx, request, &reply);
    double echo_s = Seconds(t1, Clock::now());
    if (!echoed.ok()) return absl::UnavailableError("64 MiB echo: " + echoed.error_message());
    if (r == -1) {
      if (back != data) return absl::InternalError("the raw baseline echoed different bytes");
      continue;
    }
    grpc_echo.push_back(gib / echo_s);
    sdk.push_back(gib / (t.create_s + t.read_s));
    create_gibs.push_back(gib / 2 / t.create_s);
    read_gibs.push_back(gib / 2 / t.read_s);
    raw.push_back(gib / raw_s);
  }
  Row row;
  row.id = "unary";
  row.name = absl::StrCat("SDK Create+Read ", options.bytes >> 20, " MiB (unix)");
  row.unit = "GiB/s";
  row.lower_is_better = false;
  row.figure = Summarize(sdk);
  row.baseline_name = "raw Unix-socket stream there and back, child process";
  row.baseline = Summarize(raw);
  row.goal = "(none; P3 >= 0.5x is for the chunked path)";
  row.goal_met = true;
  row.verdict = "reported";
  row.note = absl::StrFormat(
      "bytes counted both ways; Create alone %.2f GiB/s, Read alone %.2f GiB/s (medians of %d)",
      Summarize(create_gibs).p50, Summarize(read_gibs).p50, options.repetitions);
  Row vs_grpc = row;
  vs_grpc.id = "unary*";
  vs_grpc.baseline_name = "bare gRPC unary echo of the same bytes, child process";
  vs_grpc.baseline = Summarize(grpc_echo);
  vs_grpc.note = "diagnostic: how much of the gap to the raw stream is gRPC's own unary path";
  return std::vector<Row>{row, vs_grpc};
}

}  // namespace cubed::cpubench
