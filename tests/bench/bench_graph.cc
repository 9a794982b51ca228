// Measurement 6 (P11): replay of a recorded graph of 1000 tiny kernels through the daemon vs an
// in-process CUDA graph of 1000 empty launches (CUDA), and vs the same kernels sent one execute
// at a time on the session stream (both backends).
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "tests/bench/bench_measure.h"

namespace cubed::bench {

absl::StatusOr<std::vector<Row>> MeasureGraphReplay(Client& client, CudaBaseline* cuda,
                                                    const BenchOptions& options) {
  if (client.transport() != Transport::kStream) {
    return absl::FailedPreconditionError("recorded graphs need the session stream");
  }
  constexpr int kNodes = 1000;
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
  if (cuda != nullptr) {
    ASSIGN_OR_RETURN(std::vector<double> rate,
                     cuda->GraphNodeRate(kNodes, replays, options.repeats));
    row.baseline = Summarize(rate);
    row.baseline_name = "in-process CUDA graph of 1000 empty launches (640 B args, 256 threads)";
    row.goal = ">= 0.8x";
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
  return std::vector<Row>{row, each};
}

}  // namespace cubed::bench
