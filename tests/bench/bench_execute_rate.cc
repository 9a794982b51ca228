// Measurement 3: tiny Execute rate through the daemon (the client's transport: the pipelined
// session stream over the command ring, P2, over gRPC on the Unix socket, P2g, or on TCP
// loopback, P2t (P2 remote), or one unary call per command, P2u) vs in-process launches; over
// the ring and TCP also with samples ten times longer (P2s, P2ts).
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/kernel_metadata.h"
#include "common/status_macros.h"
#include "kernels/cpu/cpu_kernels.h"
#include "tests/bench/bench_measure.h"

namespace cubed::bench {
namespace {

// Calls/s of kernels::RunBuiltinCpu("fill") on one f32 in this process.
absl::StatusOr<std::vector<double>> InProcessFillRate(int count, int repeats) {
  kernels::BuiltinCall call;
  call.name = "fill";
  const uint64_t len[] = {1};
  const TensorLayout layout[] = {TensorLayout::Contiguous({1})};
  ASSIGN_OR_RETURN(const std::vector<uint32_t> words, EncodeKernelMetadata(len, layout));
  call.metadata = kernels::ToMetadataWords(words);
  const float one = 1.0f;
  kernels::ScalarGroup group;
  group.bytes.resize(sizeof(float));
  std::memcpy(group.bytes.data(), &one, sizeof(float));
  call.scalars.push_back(group);
  float target = 0;
  const kernels::HostBuffer buffer{reinterpret_cast<uint8_t*>(&target), sizeof(float)};
  std::vector<double> samples;
  for (int r = -1; r < repeats; ++r) {  // r = -1: warm-up.
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < count; ++i) RETURN_IF_ERROR(kernels::RunBuiltinCpu(call, {buffer}));
    if (r >= 0) samples.push_back(count / SecondsSince(t0));
  }
  if (target != 1.0f) return absl::InternalError("in-process fill did not write 1");
  return samples;
}

}  // namespace

absl::StatusOr<std::vector<Row>> MeasureExecuteRate(Client& client, CudaBaseline* cuda,
                                                    const BenchOptions& options) {
  ASSIGN_OR_RETURN(Tensor t, CreatePatternTensor(client, {1}));
  const BuiltinKernel fill = Builtin("fill", ElemType::kF32);
  const std::vector<Scalars> scalars = {Scalars{ElemType::kF32, {1.0}, {}, {}}};
  auto run = [&] { return client.Execute(fill, {}, {t}, scalars); };
  for (int i = 0; i < 200; ++i) RETURN_IF_ERROR(run());
  RETURN_IF_ERROR(client.Sync().get());

  // One sample: `count` commands, then a Sync; the rate of the whole sample.
  auto sample = [&](int count) -> absl::StatusOr<double> {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < count; ++i) RETURN_IF_ERROR(run());
    RETURN_IF_ERROR(client.Sync().get());
    return count / SecondsSince(t0);
  };
  // A warm-up sample first, then the figure's samples, then the baseline's: GPU runs 80-82
  // measured P2 (first, 200 commands after connecting) at 0.52-0.60x and P2s right after it at
  // 0.82-0.86x of the same baseline, while P2 with 2,000 and with 20,000 commands a sample ran
  // alike (so not its syncs): clocks that ramp up under sustained launches would do that.
  // (Alternating figure and baseline samples was tried on the 2-core VM: P2 1.17 -> 1.00-1.08 M
  // cmd/s, the daemon's threads going to sleep during each baseline sample.)
  const int count = options.execute_count;
  RETURN_IF_ERROR(sample(count).status());
  std::vector<double> figure;
  for (int r = 0; r < options.repeats; ++r) {
    ASSIGN_OR_RETURN(const double f, sample(count));
    figure.push_back(f);
  }
  ASSIGN_OR_RETURN(const std::vector<double> baseline,
                   cuda != nullptr ? cuda->EmptyLaunchRate(count, options.repeats)
                                   : InProcessFillRate(count, options.repeats));
  const bool stream = client.transport() == Transport::kStream;
  const bool ring = stream && client.stream_carrier() == StreamCarrier::kRing;
  const bool tcp = stream && !absl::StartsWith(client.options().address, "unix:");
  Row row;
  row.id = !stream ? "P2u" : ring ? "P2" : tcp ? "P2t" : "P2g";
  row.name = !stream ? "unary Execute fill(1 x f32) via SDK"
             : ring  ? "pipelined Execute fill(1 x f32), SDK session stream over the command ring"
             : tcp   ? "pipelined Execute fill(1 x f32), SDK session stream over TCP loopback"
                     : "pipelined Execute fill(1 x f32), SDK session stream over gRPC";
  row.unit = "cmd/s";
  row.figure = Summarize(figure);
  row.goal = ring || tcp ? (cuda != nullptr ? ">= 0.9x" : ">= 1,000,000 cmd/s")
                         : "report (the goal is for the local and the remote session stream)";
  row.note = absl::StrCat(count, " commands + Sync per sample, one thread, ",
                          stream ? "batched on the session stream" : "each a unary gRPC round trip",
                          ", after a warm-up sample");
  row.baseline = Summarize(baseline);
  row.baseline_name =
      cuda != nullptr ? "in-process cuLaunchKernel, empty kernel" : "in-process RunBuiltinCpu fill";
  std::vector<Row> rows = {row};
  if (ring || tcp) {
    // The same with samples ten times longer: a Sync drains the pipeline (up to the stream's
    // 4096 commands in flight, and the ring), and the client waits meanwhile; the longer the
    // sample, the less that weighs. What a client that syncs rarely gets.
    const int sustained = count * 10;
    std::vector<double> long_figure;
    for (int r = 0; r < options.repeats; ++r) {
      ASSIGN_OR_RETURN(const double f, sample(sustained));
      long_figure.push_back(f);
    }
    Row s = row;
    s.id = ring ? "P2s" : "P2ts";
    s.name = "the same, sustained: samples ten times longer";
    s.figure = Summarize(long_figure);
    s.goal = "report (P2's goal, with fewer syncs)";
    s.note = absl::StrCat(sustained, " commands + Sync per sample (P2's baseline)");
    rows.push_back(s);
  }
  if (cuda != nullptr && ring) {
    // What a builtin's launch itself costs in-process: bounds what the loop can reach.
    ASSIGN_OR_RETURN(std::vector<double> rate,
                     cuda->EmptyLaunchRate(options.execute_count, options.repeats, true));
    Row like;
    like.id = "P2x";
    like.name = "in-process cuLaunchKernel, empty kernel with a builtin's 640 B args, 256 threads";
    like.unit = "cmd/s";
    like.figure = Summarize(rate);
    like.baseline_name = row.baseline_name;
    like.baseline = row.baseline;
    like.goal = "report (what P2's launches cost without the daemon)";
    rows.push_back(like);
  }
  return rows;
}

}  // namespace cubed::bench
