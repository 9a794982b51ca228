// cubed_sdk_bench: the C++ SDK's figures for tests/bench/python/client_core_bench.py, which
// starts the daemon, runs this against it, measures the Python SDK (both cores) against the same
// daemon in the same run, and prints the ratios (issue 13, "One client core"):
//   L1: a 4-byte read, waited for, one at a time (median of --reads, microseconds);
//   P2: pipelined Execute fill(1 x f32), --executes then a Sync per sample (median cmd/s);
//   P3: Create + Read of --bytes through the SDK's defaults, 2 x bytes / wall (median GB/s).
// Prints one JSON object on stdout. The same measurements as bench_read_latency.cc,
// bench_execute_rate.cc and bench_transfer.cc of cubed_gpu_bench, without their baselines.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "client/client.h"

ABSL_FLAG(std::string, address, "", "the daemon's gRPC target (unix:PATH or HOST:PORT)");
ABSL_FLAG(int, reads, 2000, "L1: 4-byte reads timed");
ABSL_FLAG(int, executes, 20000, "P2: executes per sample");
ABSL_FLAG(uint64_t, bytes, uint64_t{256} << 20, "P3: bytes created and read per sample");
ABSL_FLAG(int, repeats, 5, "P2 and P3: samples");

namespace {

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

absl::Status Fail(absl::string_view what, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
}

absl::Status Run() {
  cubed::ClientOptions options;
  options.address = absl::GetFlag(FLAGS_address);
  absl::StatusOr<std::unique_ptr<cubed::Client>> connected = cubed::Client::Connect(options);
  if (!connected.ok()) return Fail("connect", connected.status());
  cubed::Client& client = **connected;

  // L1.
  const float one = 1.5f;
  absl::StatusOr<cubed::Tensor> t =
      client.CreateTensor({reinterpret_cast<const uint8_t*>(&one), sizeof(one)}, {1}, 4);
  if (!t.ok()) return Fail("create", t.status());
  std::vector<double> read_us;
  for (int r = -100; r < absl::GetFlag(FLAGS_reads); ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<std::vector<std::string>> got = client.Read({t->handle}).get();
    const double us = SecondsSince(t0) * 1e6;
    if (!got.ok()) return Fail("read", got.status());
    float v = 0;
    if (got->size() != 1 || (*got)[0].size() != sizeof(v)) {
      return absl::InternalError("the 4-byte read returned the wrong size");
    }
    std::memcpy(&v, (*got)[0].data(), sizeof(v));
    if (v != one) return absl::InternalError("the 4-byte read returned a wrong value");
    if (r >= 0) read_us.push_back(us);
  }

  // P2.
  const cubed::BuiltinKernel fill = cubed::Builtin("fill", cubed::ElemType::kF32);
  const std::vector<cubed::Scalars> scalars = {
      cubed::Scalars{cubed::ElemType::kF32, {1.0}, {}, {}}};
  auto run = [&] { return client.Execute(fill, {}, {*t}, scalars); };
  for (int i = 0; i < 200; ++i) {
    if (absl::Status s = run(); !s.ok()) return Fail("execute", s);
  }
  if (absl::Status s = client.Sync().get(); !s.ok()) return Fail("sync", s);
  std::vector<double> rate;
  const int executes = absl::GetFlag(FLAGS_executes);
  for (int r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < executes; ++i) {
      if (absl::Status s = run(); !s.ok()) return Fail("execute", s);
    }
    if (absl::Status s = client.Sync().get(); !s.ok()) return Fail("sync", s);
    rate.push_back(executes / SecondsSince(t0));
  }

  // P3.
  const uint64_t bytes = absl::GetFlag(FLAGS_bytes);
  std::vector<uint8_t> data(bytes);
  for (uint64_t i = 0; i < bytes; ++i) data[i] = static_cast<uint8_t>(i * 131 + 7);
  std::vector<double> gbps;
  for (int r = -1; r < absl::GetFlag(FLAGS_repeats); ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<cubed::Handle> h = client.Create(data);
    if (!h.ok()) return Fail("create", h.status());
    absl::StatusOr<std::vector<std::string>> got = client.Read({*h}).get();
    const double s = SecondsSince(t0);
    if (!got.ok()) return Fail("read", got.status());
    if (got->size() != 1 || (*got)[0].size() != bytes ||
        std::memcmp((*got)[0].data(), data.data(), bytes) != 0) {
      return absl::InternalError("Read returned different bytes than Create stored");
    }
    if (r >= 0) gbps.push_back(2.0 * bytes / s / 1e9);
  }
  const char* carrier = client.stream_carrier() == cubed::StreamCarrier::kRing ? "ring" : "grpc";
  std::printf(
      "{\"carrier\": \"%s\", \"read_us\": %.3f, \"execute_per_s\": %.1f, \"transfer_gbps\": "
      "%.4f, \"read_us_samples\": %d, \"execute_samples\": [%s], \"transfer_samples\": [%s]}\n",
      carrier, Median(read_us), Median(rate), Median(gbps), static_cast<int>(read_us.size()),
      absl::StrJoin(rate, ", ").c_str(), absl::StrJoin(gbps, ", ").c_str());
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // As a C++ application of the SDK should (docs/api.md, "Abseil's lock-order graph").
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const absl::Status s = Run();
  if (!s.ok()) {
    std::fprintf(stderr, "cubed_sdk_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
