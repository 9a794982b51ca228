// Measurement 1: builtin f32 `add` effective bandwidth vs a device-to-device copy (P7).
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "tests/bench/bench_measure.h"

namespace cubed::bench {
namespace {

// Host memcpy bandwidth (2 x bytes / time) between two warm buffers, one sample per repeat.
std::vector<double> MemcpyBandwidth(uint64_t bytes, int iters, int repeats) {
  std::vector<uint8_t> src(bytes, 7), dst(bytes, 1);
  std::memcpy(dst.data(), src.data(), bytes);
  std::vector<double> samples;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) {
      src[i % bytes] = static_cast<uint8_t>(i);  // Keeps the copies from being merged.
      std::memcpy(dst.data(), src.data(), bytes);
    }
    samples.push_back(2.0 * bytes * iters / SecondsSince(t0) / 1e9);
  }
  return samples;
}

constexpr double kA = 1.5, kB = 2.25;  // Values of the two inputs (sum exact in f32).

// An f32 tensor of n elements set to `value` on the device by the builtin `fill` (no transfer).
absl::StatusOr<Tensor> FilledTensor(Client& client, uint64_t n, double value) {
  ASSIGN_OR_RETURN(Tensor t, client.EmptyTensor({n}, sizeof(float)));
  RETURN_IF_ERROR(client.Execute(Builtin("fill", ElemType::kF32), {}, {t},
                                 {Scalars{ElemType::kF32, {value}, {}, {}}}));
  return t;
}

// Reads the first 16 elements of `out` and checks out = kA + kB.
absl::Status CheckSum(Client& client, const Tensor& out) {
  const uint64_t keep = 16 * sizeof(float);
  ASSIGN_OR_RETURN(std::vector<std::string> got,
                   client.Read({Binding(out.handle, 0, out.handle.size() - keep)}).get());
  if (got.size() != 1 || got[0].size() != keep) {
    return absl::InternalError("reading the add output returned the wrong size");
  }
  for (uint64_t i = 0; i < 16; ++i) {
    float v = 0;
    std::memcpy(&v, got[0].data() + i * sizeof(float), sizeof(float));
    if (v != static_cast<float>(kA + kB)) {
      return absl::InternalError(absl::StrFormat("add output[%d] = %g, want %g", i, v, kA + kB));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<Row>> MeasureElementwise(Client& client, CudaBaseline* cuda,
                                                    const BenchOptions& options) {
  const uint64_t n = options.add_bytes / sizeof(float);
  const uint64_t bytes = n * sizeof(float);
  ASSIGN_OR_RETURN(Tensor a, FilledTensor(client, n, kA));
  ASSIGN_OR_RETURN(Tensor b, FilledTensor(client, n, kB));
  ASSIGN_OR_RETURN(Tensor out, client.EmptyTensor({n}, sizeof(float)));
  const BuiltinKernel add = Builtin("add", ElemType::kF32);
  auto run = [&] { return client.Execute(add, {a, b}, {out}); };
  for (int i = 0; i < 3; ++i) RETURN_IF_ERROR(run());
  RETURN_IF_ERROR(client.Sync().get());
  RETURN_IF_ERROR(CheckSum(client, out));

  std::vector<double> figure;
  std::string issue_note;  // Set when any sample was issue-bound.
  for (int r = 0; r < options.repeats; ++r) {
    ASSIGN_OR_RETURN(Profiled p, ProfiledSeconds(client, options.add_iters, run));
    if (options.cuda && !IssueBoundNote(p, options.add_iters).empty())
      issue_note = IssueBoundNote(p, options.add_iters);
    figure.push_back(3.0 * bytes * options.add_iters / p.device_s / 1e9);
  }
  Row row;
  row.id = "P7";
  row.name = "builtin add f32, 3 x bytes / device time";
  row.unit = "GB/s";
  row.figure = Summarize(figure);
  row.goal = ">= 0.85x";
  row.note =
      absl::StrCat(bytes >> 20, " MiB per tensor, ", options.add_iters,
                   " kernels per sample, device time from StartProfile/EndProfile", issue_note);
  if (cuda != nullptr) {
    ASSIGN_OR_RETURN(std::vector<double> copy,
                     cuda->CopyDtoDSeconds(bytes, options.add_iters, options.repeats));
    for (double& s : copy) s = 2.0 * bytes / s / 1e9;
    row.baseline_name = "cuMemcpyDtoDAsync, 2 x bytes / time";
    row.baseline = Summarize(copy);
  } else {
    row.baseline_name = "host memcpy (1 thread), 2 x bytes";
    row.baseline = Summarize(MemcpyBandwidth(bytes, options.add_iters, options.repeats));
    absl::StrAppend(&row.note,
                    "; CPU backend: busy time of the server loop, kernel multi-threaded");
  }
  return std::vector<Row>{row};
}

}  // namespace cubed::bench
