// Measurement 4: builtin f32 matmul TFLOP/s vs cuBLAS sgemm on the same shapes (P8).
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "tests/bench/bench_measure.h"

namespace cubed::bench {

absl::StatusOr<std::vector<Row>> MeasureMatmul(Client& client, CudaBaseline* cuda,
                                               const BenchOptions& options) {
  std::vector<Row> rows;
  for (uint64_t s : options.matmul_sizes) {
    const double flops = 2.0 * s * s * s;
    ASSIGN_OR_RETURN(Tensor a, CreatePatternTensor(client, {s, s}));
    ASSIGN_OR_RETURN(Tensor b, CreatePatternTensor(client, {s, s}));
    ASSIGN_OR_RETURN(Tensor c, client.EmptyTensor({s, s}, sizeof(float)));
    const BuiltinKernel matmul = Builtin("matmul", ElemType::kF32);
    auto run = [&] { return client.Execute(matmul, {a, b}, {c}); };
    RETURN_IF_ERROR(run());
    RETURN_IF_ERROR(client.Sync().get());

    std::vector<double> figure;
    std::string issue_note;  // Set when any sample was issue-bound.
    for (int r = 0; r < options.repeats; ++r) {
      ASSIGN_OR_RETURN(Profiled p, ProfiledSeconds(client, options.matmul_iters, run));
      if (options.cuda && !IssueBoundNote(p, options.matmul_iters).empty())
        issue_note = IssueBoundNote(p, options.matmul_iters);
      figure.push_back(flops * options.matmul_iters / p.device_s / 1e12);
    }
    Row row;
    row.id = "P8";
    row.name = absl::StrCat("builtin matmul f32 ", s, "^3");
    row.unit = "TFLOP/s";
    row.figure = Summarize(figure);
    row.goal = ">= 0.9x";
    row.note = absl::StrCat(options.matmul_iters, " kernels per sample, device time", issue_note);
    if (cuda == nullptr) {
      absl::StrAppend(&row.note, "; no baseline on the CPU backend");
    } else {
      absl::StatusOr<std::vector<double>> blas =
          cuda->SgemmSeconds(s, s, s, options.matmul_iters, options.repeats);
      if (absl::IsUnavailable(blas.status())) {
        absl::StrAppend(&row.note, "; ", blas.status().message());
      } else if (!blas.ok()) {
        return blas.status();
      } else {
        for (double& t : *blas) t = flops / t / 1e12;
        row.baseline_name = "cuBLAS sgemm (default math, no TF32)";
        row.baseline = Summarize(*blas);
      }
    }
    rows.push_back(row);
  }
  return rows;
}

}  // namespace cubed::bench
