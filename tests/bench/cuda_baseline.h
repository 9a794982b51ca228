#pragma once

// In-process CUDA baselines for cubed_gpu_bench, measured with the driver API on the same GPU the
// daemon uses (primary context, one non-blocking stream, times from CUDA events). Every method
// warms up first and never times untouched memory. Built without cuda.h, Open returns
// UNIMPLEMENTED (cuda_baseline_absent.cc).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cubed::bench {

class CudaBaseline {
 public:
  // Loads the driver, retains device `ordinal`'s primary context and makes it current on the
  // calling thread (every method must be called from that thread). FAILED_PRECONDITION when the
  // driver or device is missing.
  static absl::StatusOr<std::unique_ptr<CudaBaseline>> Open(int ordinal);
  virtual ~CudaBaseline() = default;

  // Device name and driver version, e.g. "NVIDIA H200 (driver 13000)".
  virtual std::string Describe() const = 0;

  // Seconds per cuMemcpyDtoDAsync of `bytes`, one sample per repeat (each averaging `iters`
  // copies between two initialized buffers).
  virtual absl::StatusOr<std::vector<double>> CopyDtoDSeconds(uint64_t bytes, int iters,
                                                              int repeats) = 0;

  // Seconds for one cuMemcpyHtoDAsync plus one cuMemcpyDtoHAsync of `bytes` between
  // cuMemHostAlloc'd buffers and device memory, one sample per repeat.
  virtual absl::StatusOr<std::vector<double>> PinnedRoundTripSeconds(uint64_t bytes,
                                                                     int repeats) = 0;

  // Launches per second of an empty kernel (PTX loaded with cuModuleLoadData): `launches`
  // cuLaunchKernel calls and one stream synchronize, one sample per repeat (host wall clock).
  // `like_builtin`: the kernel takes a 640-byte parameter and runs 256 threads, as a builtin's
  // launch of one element does (CudaBuiltinArgs), to tell its launch cost from the daemon's.
  virtual absl::StatusOr<std::vector<double>> EmptyLaunchRate(int launches, int repeats,
                                                              bool like_builtin = false) = 0;

  // Kernels per second of an in-process CUDA graph of `nodes` empty-kernel launches (with a
  // builtin's 640-byte parameter and 256 threads, as EmptyLaunchRate's like_builtin), captured
  // once, replayed `replays` times then synchronized; one sample per repeat (host wall clock).
  virtual absl::StatusOr<std::vector<double>> GraphNodeRate(int nodes, int replays,
                                                            int repeats) = 0;

  // Microseconds per read of 4 bytes of device memory into pinned host memory
  // (cuMemcpyDtoHAsync + cuStreamSynchronize, what PyTorch's .item() does), one sample per read.
  virtual absl::StatusOr<std::vector<double>> SmallReadMicros(int reads) = 0;

  // Seconds per cuBLAS sgemm of row-major [m,k] x [k,n], one sample per repeat (each averaging
  // `iters`). UNAVAILABLE "cuBLAS not available on this machine: ..." when libcublas cannot be
  // loaded.
  virtual absl::StatusOr<std::vector<double>> SgemmSeconds(uint64_t m, uint64_t n, uint64_t k,
                                                           int iters, int repeats) = 0;
};

}  // namespace cubed::bench
