// cubed_gpu_bench: starts the real daemon and measures it against baselines taken in the same run
// (design/PERFORMANCE.md): 1 builtin add bandwidth vs D2D copy, 2 Create + Read vs a pinned round
// trip, 3 unary tiny Execute rate vs in-process launches, 4 matmul vs cuBLAS. Prints a table and
// writes JSON (--json). --backend=cpu runs 1-3 against the CPU backend with host baselines.

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "tests/bench/bench_measure.h"
#include "tests/testing/daemon_process.h"

ABSL_FLAG(std::string, cubed, "",
          "The cubed binary (default: $CUBED_BINARY, else this build's server/cubed).");
ABSL_FLAG(std::string, backend, "cuda",
          "cuda (measurements 1-6) or cpu (all but 4, host baselines).");
ABSL_FLAG(int, device, 0, "CUDA device ordinal, for the daemon and the baselines.");
ABSL_FLAG(std::string, json, "", "Write the results as JSON to this file.");
ABSL_FLAG(std::string, only, "1,2,3,4,5,6", "Measurements to run, comma-separated.");
ABSL_FLAG(int, repeats, 7, "Samples per figure (median and min..max reported).");
ABSL_FLAG(double, add_mib, 1024,
          "Measurement 1: MiB per f32 tensor (big enough that a kernel outlasts a unary call).");
ABSL_FLAG(int, add_iters, 50, "Measurement 1: kernels per sample.");
ABSL_FLAG(double, transfer_mib, 256, "Measurement 2: MiB created and read.");
ABSL_FLAG(int, execute_count, 2000, "Measurement 3: commands per sample.");
ABSL_FLAG(bool, execute_others, true,
          "Measurement 3: also over the gRPC stream and unary calls (false: the default client "
          "only, e.g. for a profile).");
ABSL_FLAG(std::string, matmul, "4096,2048,1024", "Measurement 4: square sizes (CUDA only).");
ABSL_FLAG(int, matmul_iters, 10, "Measurement 4: kernels per sample.");
ABSL_FLAG(int, graph_replays, 100, "Measurement 6: replays of the 1000-kernel graph per sample.");
ABSL_FLAG(std::vector<std::string>, daemon_flags, {},
          "Extra flags for the daemon, comma-separated (e.g. --memory_limit=8GiB).");

namespace cubed::bench {
namespace {

// MiB as a byte count, rounded down to whole f32 elements (at least one).
uint64_t MibToBytes(double mib) {
  const uint64_t bytes = static_cast<uint64_t>(std::llround(mib * 1048576.0)) / 4 * 4;
  return bytes < 4 ? 4 : bytes;
}

absl::StatusOr<std::vector<uint64_t>> ParseSizes(const std::string& list) {
  std::vector<uint64_t> sizes;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    uint64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v == 0) {
      return absl::InvalidArgumentError(absl::StrCat("--matmul: bad size '", part, "'"));
    }
    sizes.push_back(v);
  }
  return sizes;
}

absl::Status Run() {
  const std::string backend = absl::GetFlag(FLAGS_backend);
  if (backend != "cuda" && backend != "cpu") {
    return absl::InvalidArgumentError("--backend must be cuda or cpu, got '" + backend + "'");
  }
  BenchOptions options;
  options.cuda = backend == "cuda";
  options.repeats = std::max(1, absl::GetFlag(FLAGS_repeats));
  options.add_bytes = MibToBytes(absl::GetFlag(FLAGS_add_mib));
  options.add_iters = std::max(1, absl::GetFlag(FLAGS_add_iters));
  options.transfer_bytes = MibToBytes(absl::GetFlag(FLAGS_transfer_mib));
  options.execute_count = std::max(1, absl::GetFlag(FLAGS_execute_count));
  ASSIGN_OR_RETURN(options.matmul_sizes, ParseSizes(absl::GetFlag(FLAGS_matmul)));
  options.matmul_iters = std::max(1, absl::GetFlag(FLAGS_matmul_iters));
  options.graph_replays = std::max(1, absl::GetFlag(FLAGS_graph_replays));
  const std::string only = absl::GetFlag(FLAGS_only);
  auto selected = [&](const char* n) {
    for (absl::string_view p : absl::StrSplit(only, ',')) {
      if (p == n) return true;
    }
    return false;
  };

  std::vector<std::pair<std::string, std::string>> context = {
      {"backend", backend},
      {"date", absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone())}};
  std::unique_ptr<CudaBaseline> cuda;
  if (options.cuda) {
    ASSIGN_OR_RETURN(cuda, CudaBaseline::Open(absl::GetFlag(FLAGS_device)));
    context.push_back({"device", cuda->Describe()});
    std::printf("in-process baselines on %s\n", cuda->Describe().c_str());
  }

  testing::DaemonProcess::Options daemon_options;
  daemon_options.binary = absl::GetFlag(FLAGS_cubed);
  if (daemon_options.binary.empty()) daemon_options.binary = testing::CubedBinaryPath();
  daemon_options.backend = backend;
  daemon_options.flags = {absl::StrCat("--device=", absl::GetFlag(FLAGS_device)),
                          "--log_level=warn"};
  for (const std::string& f : absl::GetFlag(FLAGS_daemon_flags)) daemon_options.flags.push_back(f);
  daemon_options.start_timeout = absl::Seconds(60);
  daemon_options.tcp = true;  // P2t: the session stream over TCP loopback (issue 13's P2 remote).
  ASSIGN_OR_RETURN(std::unique_ptr<testing::DaemonProcess> daemon,
                   testing::DaemonProcess::Start(daemon_options));
  context.push_back({"daemon", daemon_options.binary});
  ClientOptions client_options;
  client_options.address = daemon->unix_address();
  client_options.timeout = absl::Minutes(5);
  client_options.device = 0;  // The daemon serves the one device it was given.
  ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Connect(client_options));
  ASSIGN_OR_RETURN(DaemonInfo info, client->GetInfo());
  context.push_back({"daemon_device", info.device.name()});
  context.push_back({"daemon_version", info.version});
  std::printf("daemon %s serving at %s\n", info.version.c_str(), daemon->unix_address().c_str());

  std::vector<Row> rows;
  absl::Status failed = absl::OkStatus();
  auto measure = [&](const char* n, const char* what, auto fn) {
    if (!selected(n)) return;
    std::printf("measuring %s: %s ...\n", n, what);
    std::fflush(stdout);
    absl::StatusOr<std::vector<Row>> got = fn(*client, cuda.get(), options);
    if (!got.ok()) {
      std::printf("measurement %s failed: %s\n", n, got.status().ToString().c_str());
      if (failed.ok()) failed = got.status();
      return;
    }
    rows.insert(rows.end(), got->begin(), got->end());
  };
  measure("1", "builtin add bandwidth", MeasureElementwise);
  measure("2", "Create + Read", MeasureTransfer);
  measure("3", "tiny Execute rate", MeasureExecuteRate);
  measure("5", "4-byte read latency", MeasureReadLatency);
  if (client->transport() == Transport::kStream) {
    measure("6", "recorded graph replay", MeasureGraphReplay);
  }
  if (selected("3") && client->transport() == Transport::kStream &&
      absl::GetFlag(FLAGS_execute_others)) {
    // The same measurement over the gRPC stream and over unary calls, for comparison.
    ClientOptions grpc_options = client_options;
    grpc_options.stream_carrier = StreamCarrier::kGrpc;
    ClientOptions unary_options = client_options;
    unary_options.transport = Transport::kUnary;
    ClientOptions tcp_options = client_options;
    tcp_options.address = daemon->tcp_address();
    for (const ClientOptions& other : {grpc_options, tcp_options, unary_options}) {
      absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect(other);
      if (!c.ok()) continue;
      absl::StatusOr<std::vector<Row>> got = MeasureExecuteRate(**c, cuda.get(), options);
      if (got.ok()) rows.insert(rows.end(), got->begin(), got->end());
    }
  }
  if (options.cuda) {
    measure("4", "matmul", MeasureMatmul);
  } else if (selected("4")) {
    std::printf("measurement 4 (matmul vs cuBLAS) needs --backend=cuda; skipped\n");
  }
  PrintTable(absl::StrCat("cubed_gpu_bench, backend ", backend,
                          cuda ? " on " + cuda->Describe() : std::string()),
             rows);

  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    std::ofstream out(path);
    out << ToJson(context, rows);
    if (!out.good()) return absl::InternalError("could not write --json=" + path);
    std::printf("wrote %s\n", path.c_str());
  }
  client.reset();
  if (!failed.ok()) {
    std::printf("daemon log tail:\n%s\n", daemon->LogTail().c_str());
  }
  return failed;
}

}  // namespace
}  // namespace cubed::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "cubed_gpu_bench [--backend=cuda|cpu] [--cubed=PATH] [--json=FILE] [size flags]");
  absl::ParseCommandLine(argc, argv);
  // As a C++ application of the SDK should (docs/api.md, "Abseil's lock-order graph").
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const absl::Status s = cubed::bench::Run();
  if (!s.ok()) {
    std::fprintf(stderr, "cubed_gpu_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
