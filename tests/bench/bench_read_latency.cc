// Measurement 5: the latency of reading 4 bytes back through the daemon (L1), one read waited
// for at a time, vs the same read in-process on CUDA (what PyTorch's .item() costs).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "tests/bench/bench_measure.h"

namespace cubed::bench {

absl::StatusOr<std::vector<Row>> MeasureReadLatency(Client& client, CudaBaseline* cuda,
                                                    const BenchOptions& options) {
  const int reads = std::max(100, options.read_count);
  ASSIGN_OR_RETURN(Tensor t, CreatePatternTensor(client, {1}));
  const Binding binding(t.handle);
  // `poll`: waited for with Client::Await, which polls the future before it blocks (Note [Waiting
  // awake], client.h); otherwise with future.get(), which sleeps at once: the difference is what
  // the wake-up costs.
  auto measure = [&](bool poll) -> absl::StatusOr<std::vector<double>> {
    std::vector<double> figure;
    for (int r = -20; r < reads; ++r) {  // r < 0: warm-up.
      const auto t0 = std::chrono::steady_clock::now();
      std::future<absl::StatusOr<std::vector<std::string>>> answer = client.Read({binding});
      ASSIGN_OR_RETURN(std::vector<std::string> got,
                       poll ? client.Await(std::move(answer)) : answer.get());
      const double us = SecondsSince(t0) * 1e6;
      float v = 0;
      if (got.size() != 1 || got[0].size() != sizeof(v)) {
        return absl::InternalError("the 4-byte read returned the wrong size");
      }
      std::memcpy(&v, got[0].data(), sizeof(v));
      if (v != PatternValue(0))
        return absl::InternalError("the 4-byte read returned a wrong value");
      if (r >= 0) figure.push_back(us);
    }
    return figure;
  };
  const bool stream = client.transport() == Transport::kStream;
  const bool ring = stream && client.stream_carrier() == StreamCarrier::kRing;
  std::vector<double> base;
  if (cuda != nullptr) {
    ASSIGN_OR_RETURN(base, cuda->SmallReadMicros(reads));
  }
  std::vector<Row> rows;
  for (const bool poll : {true, false}) {
    ASSIGN_OR_RETURN(std::vector<double> figure, measure(poll));
    Row row;
    row.id = poll ? "L1" : "L1g";
    row.name = absl::StrCat("4-byte read round trip, C++ SDK, ",
                            !stream ? "unary Read"
                            : ring  ? "command ring"
                                    : "gRPC stream",
                            poll ? ", Client::Await" : ", future.get()");
    row.unit = "us";
    row.lower_is_better = true;
    row.show_p99 = true;
    row.figure = Summarize(figure);
    row.goal = poll ? "report (issue 13: the Python SDK within 1.2x of this)"
                    : "report (the sleeping waiter's wake-up: L1g - L1)";
    row.note =
        absl::StrCat(reads, " reads of one f32, each waited for before the next; reply spin ",
                     absl::FormatDuration(client.reply_spin()));
    if (!base.empty()) {
      row.baseline = Summarize(base);
      row.baseline_name = "in-process cuMemcpyDtoHAsync 4 B + sync";
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace cubed::bench
