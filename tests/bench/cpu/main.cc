// cubed-bench: the daemon's RPC-path benchmark program. Starts the real daemon (--backend=cpu by
// default; --backend=cuda measures the same paths on a GPU) and a forked baseline child,
// measures each figure with its baseline in the same run, prints a table and writes JSON
// (--json=FILE). Figures and goals: /work/shared/design/PERFORMANCE.md.

#include <signal.h>
#include <stdlib.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/bench/cpu/baseline_child.h"
#include "tests/bench/cpu/bench_report.h"
#include "tests/bench/cpu/p3_bulk.h"
#include "tests/bench/cpu/p4_region.h"
#include "tests/bench/cpu/p9_concurrent.h"
#include "tests/bench/cpu/pool_bench.h"
#include "tests/bench/cpu/rpc_latency.h"
#include "tests/bench/cpu/transfer_bench.h"
#include "tests/testing/daemon_process.h"

ABSL_FLAG(std::string, cubed, CUBED_BENCH_CUBED_PATH, "Path of the cubed daemon binary.");
ABSL_FLAG(std::string, json, "", "Also write the results as JSON to this file.");
ABSL_FLAG(std::string, backend, "cpu", "The daemon's --backend (cpu or cuda).");
ABSL_FLAG(std::vector<std::string>, only, {},
          "Figures to measure, comma-separated: P1,P3,P4,P5,P6,unary,P9 (default: all).");
ABSL_FLAG(int, rounds, 20, "P1: interleaved rounds per transport.");
ABSL_FLAG(int, calls, 400, "P1: timed calls per path per round.");
ABSL_FLAG(int, warmup_calls, 200, "P1: untimed calls per path first.");
ABSL_FLAG(int, pool_batches, 30, "P5: timed batches per size and allocator.");
ABSL_FLAG(int, pool_pairs, 5000, "P5: Reserve+Free pairs per batch.");
ABSL_FLAG(int, trace_allocs, 4000, "P6: allocations per trace.");
ABSL_FLAG(int, trace_seeds, 5, "P6: traces (seeds 1..N).");
ABSL_FLAG(int, transfer_mib, 64, "Create+read buffer size, MiB.");
ABSL_FLAG(int, transfer_reps, 7, "Create+read timed repetitions.");
ABSL_FLAG(int, bulk_mib, 256, "P3, P4: create+read buffer size, MiB.");
ABSL_FLAG(int, bulk_reps, 5, "P3, P4: timed repetitions (P3: per chunk size).");

namespace {

// Whether --only selects figure `id` (an empty --only selects all).
bool want(const std::string& id) {
  const std::vector<std::string> only = absl::GetFlag(FLAGS_only);
  return only.empty() || std::find(only.begin(), only.end(), id) != only.end();
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return absl::StrCat(a, " ", b, " ", c);
}

int Fail(const absl::Status& s, const char* what) {
  std::fprintf(stderr, "cubed-bench: %s: %s\n", what, s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> command(argv, argv + argc);
  absl::ParseCommandLine(argc, argv);
  // As a C++ application of the SDK should (docs/api.md, "Abseil's lock-order graph").
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  if (cubed::cpubench::IsConcurrentWorker()) return cubed::cpubench::RunConcurrentWorker();
  signal(SIGPIPE, SIG_IGN);
  using namespace cubed::cpubench;  // NOLINT: a program's main.

  char dir_template[] = "/tmp/cubed-bench-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) return Fail(absl::InternalError("mkdtemp"), "temp dir");
  const std::string dir = dir_template;
  const absl::Time started = absl::Now();
  const std::string load_before = LoadAverage();

  int rc = 0;
  std::vector<Row> rows;
  std::error_code ignored;
  {
    // The child must be forked before this process touches gRPC.
    absl::StatusOr<std::unique_ptr<BaselineChild>> baseline = BaselineChild::Start(dir);
    if (!baseline.ok()) {
      std::filesystem::remove_all(dir, ignored);
      return Fail(baseline.status(), "baseline child");
    }
    cubed::testing::DaemonProcess::Options daemon_options;
    daemon_options.binary = absl::GetFlag(FLAGS_cubed);
    daemon_options.backend = absl::GetFlag(FLAGS_backend);
    daemon_options.flags = {"--log_level=warn"};
    daemon_options.tcp = true;
    daemon_options.start_timeout = absl::Seconds(30);
    absl::StatusOr<std::unique_ptr<cubed::testing::DaemonProcess>> daemon =
        cubed::testing::DaemonProcess::Start(daemon_options);
    if (!daemon.ok()) {
      baseline->reset();
      std::filesystem::remove_all(dir, ignored);
      return Fail(daemon.status(), "daemon");
    }

    // Each block measures one figure and appends its rows; --only picks the blocks.
    auto run = [&]() -> absl::Status {
      if (want("P5")) {
        PoolOptions pool;
        pool.batches = absl::GetFlag(FLAGS_pool_batches);
        pool.pairs_per_batch = absl::GetFlag(FLAGS_pool_pairs);
        std::fprintf(stderr, "cubed-bench: P5 pool alloc+free ...\n");
        absl::StatusOr<std::vector<Row>> p5 = MeasurePoolAllocFree(pool);
        if (!p5.ok()) return p5.status();
        rows.insert(rows.end(), p5->begin(), p5->end());
      }
      if (want("P6")) {
        TraceOptions trace;
        trace.allocations = absl::GetFlag(FLAGS_trace_allocs);
        trace.seeds.clear();
        for (int s = 1; s <= absl::GetFlag(FLAGS_trace_seeds); ++s) trace.seeds.push_back(s);
        std::fprintf(stderr, "cubed-bench: P6 allocation trace ...\n");
        absl::StatusOr<Row> p6 = MeasureTraceOverhead(trace);
        if (!p6.ok()) return p6.status();
        rows.push_back(*p6);
      }
      if (want("P1")) {
        LatencyOptions latency;
        latency.rounds = absl::GetFlag(FLAGS_rounds);
        latency.calls_per_round = absl::GetFlag(FLAGS_calls);
        latency.warmup_calls = absl::GetFlag(FLAGS_warmup_calls);
        std::fprintf(stderr, "cubed-bench: P1 tiny unary, unix ...\n");
        absl::StatusOr<std::vector<Row>> p1u = MeasureTinyUnary(
            "unix", (*daemon)->unix_address(), (*baseline)->echo_unix_address(), latency);
        if (!p1u.ok()) return p1u.status();
        std::fprintf(stderr, "cubed-bench: P1 tiny unary, tcp ...\n");
        absl::StatusOr<std::vector<Row>> p1t = MeasureTinyUnary(
            "tcp", (*daemon)->tcp_address(), (*baseline)->echo_tcp_address(), latency);
        if (!p1t.ok()) return p1t.status();
        rows.insert(rows.begin(), p1t->begin(), p1t->end());  // P1 rows first in the table.
        rows.insert(rows.begin(), p1u->begin(), p1u->end());
      }
      if (want("unary")) {
        TransferOptions transfer;
        transfer.bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_transfer_mib)) << 20;
        transfer.repetitions = absl::GetFlag(FLAGS_transfer_reps);
        std::fprintf(stderr, "cubed-bench: create+read ...\n");
        absl::StatusOr<std::vector<Row>> unary =
            MeasureCreateRead((*daemon)->unix_address(), (*baseline)->raw_socket_path(),
                              (*baseline)->echo_unix_address(), transfer);
        if (!unary.ok()) return unary.status();
        rows.insert(rows.end(), unary->begin(), unary->end());
      }
      if (want("P3")) {
        BulkOptions bulk;
        bulk.bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_bulk_mib)) << 20;
        bulk.repetitions = absl::GetFlag(FLAGS_bulk_reps);
        std::fprintf(stderr, "cubed-bench: P3 bulk create+read ...\n");
        const std::string raw_path = (*baseline)->raw_socket_path();
        const int raw_port = (*baseline)->raw_tcp_port();
        std::vector<BulkPath> paths = {
            {"unix", (*daemon)->unix_address(), [raw_path] { return ConnectUnix(raw_path); }, 0},
            {"tcp", (*daemon)->tcp_address(), [raw_port] { return ConnectTcp(raw_port); }, 3}};
        absl::StatusOr<std::vector<Row>> p3 = MeasureBulkCreateRead(paths, bulk);
        if (!p3.ok()) return p3.status();
        rows.insert(rows.end(), p3->begin(), p3->end());
      }
      if (want("P4")) {
        RegionOptions region;
        region.bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_bulk_mib)) << 20;
        region.repetitions = absl::GetFlag(FLAGS_bulk_reps);
        std::fprintf(stderr, "cubed-bench: P4 create+read through a shared-memory region ...\n");
        absl::StatusOr<std::vector<Row>> p4 =
            MeasureRegionCreateRead((*daemon)->unix_address(), region);
        if (!p4.ok()) return p4.status();
        rows.insert(rows.end(), p4->begin(), p4->end());
      }
      if (want("P9")) {
        std::fprintf(stderr, "cubed-bench: P9 concurrent clients ...\n");
        absl::StatusOr<std::vector<Row>> p9 = MeasureConcurrentClients(
            (*daemon)->unix_address(), (*daemon)->pid(), ConcurrentOptionsFromFlags());
        if (!p9.ok()) return p9.status();
        rows.insert(rows.end(), p9->begin(), p9->end());
      }
      return absl::OkStatus();
    };
    absl::Status s = run();
    if (!s.ok()) {
      std::fprintf(stderr, "cubed-bench: %s\ndaemon log:\n%s\n", s.ToString().c_str(),
                   (*daemon)->LogTail().c_str());
      rc = 1;
    }
  }
  std::filesystem::remove_all(dir, ignored);
  if (rc != 0) return rc;

  utsname host{};
  uname(&host);
  const absl::Duration took = absl::Now() - started;
  std::vector<std::pair<std::string, std::string>> context = {
      {"program", "cubed-bench"},
      {"backend", absl::GetFlag(FLAGS_backend)},
      {"command", absl::StrJoin(command, " ")},
      {"daemon", absl::GetFlag(FLAGS_cubed)},
      {"date", absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", started, absl::UTCTimeZone())},
      {"host", absl::StrCat(host.nodename, " ", host.sysname, " ", host.release)},
      {"cpus", absl::StrCat(std::thread::hardware_concurrency())},
      {"loadavg_before", load_before},
      {"loadavg_after", LoadAverage()},
      {"seconds", absl::StrCat(absl::ToDoubleSeconds(took))},
  };
  std::printf("cubed-bench (%s backend) %s, %s cpus, load %s -> %s, %.1f s\n\n",
              context[1].second.c_str(), context[4].second.c_str(), context[6].second.c_str(),
              load_before.c_str(), context[8].second.c_str(), absl::ToDoubleSeconds(took));
  PrintTable("", rows);
  const std::string json_path = absl::GetFlag(FLAGS_json);
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << ToJson(context, rows);
    if (!out) {
      std::fprintf(stderr, "cubed-bench: cannot write %s\n", json_path.c_str());
      return 1;
    }
  }
  return 0;
}
