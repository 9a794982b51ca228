// Measurement 6 (P11): replay of a recorded graph of 1000 tiny kernels through the daemon vs an
// in-process CUDA graph of 1000 empty launches (CUDA), and vs the same kernels sent one execute
// at a time on the session stream (both backends).
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/kernel_metadata.h"
#include "common/status_macros.h"
#include "tests/bench/bench_measure.h"
#ifdef CUBED_BENCH_CUDA_SERVER
#include "server/compute/cuda/cuda_server.h"
#endif

namespace cubed::bench {
namespace {

constexpr int kNodes = 1000;

#ifdef CUBED_BENCH_CUDA_SERVER
// Kernels/s of the same graph (kNodes builtin fills of one f32) replayed by a CudaServer in this
// process, as the daemon's device loop replays it, `replays` a sample: the device's own cost of
// the graph, which the daemon's replay adds its command path to.
absl::StatusOr<std::vector<double>> InProcessGraphRate(int replays, int repeats) {
  CudaServerOptions server_options;
  server_options.memory_limit = uint64_t{64} << 20;
  ASSIGN_OR_RETURN(std::unique_ptr<CudaServer> server, CudaServer::Create(server_options));
  ASSIGN_OR_RETURN(Allocation target, server->Empty(4, kFirstSessionOwner));
  Launch fill;
  fill.kernel.builtin.name = "fill";
  const uint64_t len[] = {1};
  const TensorLayout layout[] = {TensorLayout::Contiguous({1})};
  ASSIGN_OR_RETURN(const std::vector<uint32_t> words, EncodeKernelMetadata(len, layout));
  fill.kernel.builtin.metadata = kernels::ToMetadataWords(words);
  const float one = 1.0f;
  kernels::ScalarGroup group;
  group.bytes.resize(sizeof(float));
  std::memcpy(group.bytes.data(), &one, sizeof(float));
  fill.kernel.builtin.scalars.push_back(group);
  fill.buffers.push_back(ResolvedBinding{target.slice, 0, 4});
  const std::vector<Launch> launches(kNodes, fill);
  const SliceId parameters[] = {target.slice};
  std::unique_ptr<GraphExecutable> executable;
  auto sync = [&server] {
    absl::Notification done;
    absl::Status status;
    server->Sync([&](absl::Status s) {
      status = s;
      done.Notify();
    });
    done.WaitForNotification();
    return status;
  };
  std::vector<double> samples;
  for (int r = -1; r < repeats; ++r) {  // r = -1: warm-up (compiles, captures).
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < replays; ++i) {
      RETURN_IF_ERROR(server->ExecuteGraph(launches, parameters, executable));
    }
    RETURN_IF_ERROR(sync());
    if (r >= 0) samples.push_back(static_cast<double>(kNodes) * replays / SecondsSince(t0));
  }
  executable.reset();
  server->Free(target.slice);
  return samples;
}
#endif

}  // namespace

absl::StatusOr<std::vector<Row>> MeasureGraphReplay(Client& client, CudaBaseline* cuda,
                                                    const BenchOptions& options) {
  if (client.transport() != Transport::kStream) {
    return absl::FailedPreconditionError("recorded graphs need the session stream");
  }
  const int replays = options.graph_replays;
  ASSIGN_OR_RETURN(Tensor t, CreatePatternTensor(client, {1}));
  const BuiltinKernel fill = Builtin("fill", ElemType::kF32);
  const std::vector<Scalars> scalars = {Scalars{ElemType::kF32, {1.0}, {}, {}}};
  RETURN_IF_ERROR(client.BeginGraph({t.handle}));
  for (int i = 0; i < kNodes; ++i) RETURN_IF_ERROR(client.Execute(fill, {}, {t}, scalars));
  ASSIGN_OR_RETURN(Graph graph, client.EndGraph());
  if (graph.steps != kNodes) {
    return absl::InternalError(absl::StrCat("the graph recorded ", graph.steps, " steps"));
  }
  for (int i = 0; i < 3; ++i) RETURN_IF_ERROR(client.ReplayGraph(graph, {t.handle}));  // Warm.
  RETURN_IF_ERROR(client.Sync().get());

  std::vector<double> figure;
  for (int r = 0; r < options.repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < replays; ++i) RETURN_IF_ERROR(client.ReplayGraph(graph, {t.handle}));
    RETURN_IF_ERROR(client.Sync().get());
    figure.push_back(static_cast<double>(kNodes) * replays / SecondsSince(t0));
  }
  std::vector<double> one_by_one;
  for (int r = 0; r < options.repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kNodes; ++i) RETURN_IF_ERROR(client.Execute(fill, {}, {t}, scalars));
    RETURN_IF_ERROR(client.Sync().get());
    one_by_one.push_back(kNodes / SecondsSince(t0));
  }
  RETURN_IF_ERROR(client.ReleaseGraph(graph));

  Row row;
  row.id = "P11";
  row.name = "replay of a recorded graph of 1000 fill(1 x f32), SDK session stream";
  row.unit = "kernels/s";
  row.figure = Summarize(figure);
  row.note = absl::StrCat(replays, " replays + Sync per sample, one thread");
  std::vector<Row> rows;
  if (cuda != nullptr) {
    ASSIGN_OR_RETURN(std::vector<double> rate,
                     cuda->GraphNodeRate(kNodes, replays, options.repeats));
    row.baseline = Summarize(rate);
    row.baseline_name = "in-process CUDA graph of 1000 empty launches (640 B args, 256 threads)";
    row.goal = ">= 0.8x";
#ifdef CUBED_BENCH_CUDA_SERVER
    // The same kernels' graph in this process: the ratio the daemon is answerable for.
    ASSIGN_OR_RETURN(std::vector<double> same, InProcessGraphRate(replays, options.repeats));
    Row same_row = row;
    same_row.id = "P11s";
    same_row.baseline = Summarize(same);
    same_row.baseline_name = "in-process CudaServer replaying the same 1000 fills as a CUDA graph";
    same_row.goal = ">= 0.8x (the same kernels)";
    rows.push_back(same_row);
#endif
  } else {
    row.baseline = Summarize(one_by_one);
    row.baseline_name = "the same 1000 fills as executes on the stream";
    row.goal = "report (P11's goal is on the GPU)";
  }
  Row each;
  each.id = "P11e";
  each.name = "the same 1000 fill(1 x f32) as executes on the SDK session stream";
  each.unit = "kernels/s";
  each.figure = Summarize(one_by_one);
  each.baseline_name = row.baseline_name;
  each.baseline = row.baseline;
  each.goal = "report (what a replay saves)";
  rows.insert(rows.begin(), row);
  rows.push_back(each);
  return rows;
}

}  // namespace cubed::bench
