// Measurement 5: the latency of reading 4 bytes back through the daemon (L1), one read waited
// for at a time, vs the same read in-process on CUDA (what PyTorch's .item() costs).
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "tests/bench/bench_measure.h"

namespace cubed::bench {

absl::StatusOr<std::vector<Row>> MeasureReadLatency(Client& client, CudaBaseline* cuda,
                                                    const BenchOptions& options) {
  const int reads = std::max(100, options.read_count);
  ASSIGN_OR_RETURN(Tensor t, CreatePatternTensor(client, {1}));
  const Binding binding(t.handle);
  std::vector<double> figure;
  for (int r = -20; r < reads; ++r) {  // r < 0: warm-up.
    const auto t0 = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(std::vector<std::string> got, client.Read({binding}).get());
    const double us = SecondsSince(t0) * 1e6;
    float v = 0;
    if (got.size() != 1 || got[0].size() != sizeof(v)) {
      return absl::InternalError("the 4-byte read returned the wrong size");
    }
    std::memcpy(&v, got[0].data(), sizeof(v));
    if (v != PatternValue(0)) return absl::InternalError("the 4-byte read returned a wrong value");
    if (r >= 0) figure.push_back(us);
  }
  const bool stream = client.transport() == Transport::kStream;
  const bool ring = stream && client.stream_carrier() == StreamCarrier::kRing;
  Row row;
  row.id = "L1";
  row.name = absl::StrCat("4-byte read round trip, C++ SDK, ", !stream ? "unary Read"
                                                               : ring  ? "command ring"
                                                                       : "gRPC stream");
  row.unit = "us";
  row.lower_is_better = true;
  row.show_p99 = true;
  row.figure = Summarize(figure);
  row.goal = "report (issue 13: the Python SDK within 1.2x of this)";
  row.note = absl::StrCat(reads, " reads of one f32, each waited for before the next");
  if (cuda != nullptr) {
    ASSIGN_OR_RETURN(std::vector<double> base, cuda->SmallReadMicros(reads));
    row.baseline = Summarize(base);
    row.baseline_name = "in-process cuMemcpyDtoHAsync 4 B + sync";
  }
  return std::vector<Row>{row};
}

}  // namespace cubed::bench
