#pragma once

// The four measurements of cubed_gpu_bench. Each runs its daemon side through the SDK (`client`)
// and its baseline in this process (`cuda` on the CUDA backend; host memcpy / in-process kernels
// on the CPU backend, where `cuda` is null), and returns table rows.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/client.h"
#include "tests/bench/bench_report.h"
#include "tests/bench/cuda_baseline.h"

namespace cubed::bench {

struct BenchOptions {
  bool cuda = true;                        // Backend of the daemon (false: CPU).
  int repeats = 7;                         // Samples per figure.
  uint64_t add_bytes = uint64_t{1} << 30;  // Per tensor, measurement 1.
  int add_iters = 50;                      // Kernels per sample, measurement 1.
  uint64_t transfer_bytes = 256 << 20;     // Measurement 2.
  int execute_count = 2000;                // Commands per sample, measurement 3.
  std::vector<uint64_t> matmul_sizes;      // Square sizes, measurement 4.
  int matmul_iters = 10;                   // Kernels per sample, measurement 4.
  int read_count = 2000;                   // Reads, measurement 5.
  int graph_replays = 100;                 // Replays of a 1000-kernel graph, measurement 6.
};

// 1. Builtin f32 `add` (inputs set by `fill` on the device) effective bandwidth (3 x bytes / device
// time from StartProfile / EndProfile) vs D2D copy bandwidth (2 x bytes / time) on CUDA, vs memcpy
// on the CPU.
absl::StatusOr<std::vector<Row>> MeasureElementwise(Client& client, CudaBaseline* cuda,
                                                    const BenchOptions& options);

// 2. Create + Read of transfer_bytes through the daemon (wall time, 2 x bytes / time) vs a pinned
// H2D + D2H round trip on CUDA, vs two memcpys on the CPU.
absl::StatusOr<std::vector<Row>> MeasureTransfer(Client& client, CudaBaseline* cuda,
                                                 const BenchOptions& options);

// 3. Unary `fill` of one f32 element, commands/s through the daemon, vs in-process empty-kernel
// launches/s on CUDA, vs in-process kernels::RunBuiltinCpu calls/s on the CPU.
absl::StatusOr<std::vector<Row>> MeasureExecuteRate(Client& client, CudaBaseline* cuda,
                                                    const BenchOptions& options);

// 4. Builtin f32 matmul TFLOP/s (device time from the profile) per size in matmul_sizes vs cuBLAS
// sgemm when it loads (a row without baseline and a note otherwise).
absl::StatusOr<std::vector<Row>> MeasureMatmul(Client& client, CudaBaseline* cuda,
                                               const BenchOptions& options);

// 5. Latency of a 4-byte Read through the daemon, one at a time (p50/p99), vs an in-process
// 4-byte cuMemcpyDtoHAsync + sync on CUDA; no baseline on the CPU.
absl::StatusOr<std::vector<Row>> MeasureReadLatency(Client& client, CudaBaseline* cuda,
                                                    const BenchOptions& options);

// 6. Replay of a recorded graph of 1000 `fill` kernels (P11), kernels/s, vs an in-process CUDA
// graph of 1000 empty launches on CUDA, vs the same fills sent one execute at a time on the CPU.
// The session stream only.
absl::StatusOr<std::vector<Row>> MeasureGraphReplay(Client& client, CudaBaseline* cuda,
                                                    const BenchOptions& options);

// Helpers shared by the measurements.

// A dense f32 tensor of `shape` holding a non-zero pattern (PatternValue), created through
// `client`.
absl::StatusOr<Tensor> CreatePatternTensor(Client& client, std::vector<uint64_t> shape);

// Element `i` of the pattern: 0.25 + (i % 97) / 64, exact in f32.
float PatternValue(uint64_t i);

// Seconds since `start` on the steady clock.
double SecondsSince(std::chrono::steady_clock::time_point start);

// Time of `count` launches of `run`.
struct Profiled {
  double device_s = 0;  // From StartProfile/EndProfile: device time, idle gaps included.
  double issue_s = 0;   // Host wall time the client took to issue the launches.
};

// Profiles `count` launches of `run`. Two launches are queued before the profile starts, so the
// device is busy when its start is recorded. The device stays busy only while the client issues
// faster than the kernels run: when issue_s approaches device_s, idle gaps inflate device_s.
template <typename Fn>
absl::StatusOr<Profiled> ProfiledSeconds(Client& client, int count, Fn run);

// A note warning that `p` may count idle device time (issue time >= 0.7 x device time), else "".
// Only meaningful on CUDA: the CPU backend profiles busy time, which has no gaps.
std::string IssueBoundNote(const Profiled& p, int count);

}  // namespace cubed::bench

#include "tests/bench/bench_measure_inl.h"
