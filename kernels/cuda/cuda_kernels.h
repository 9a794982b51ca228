#pragma once

// The CUDA side of the kernel library: builtin kernels as CUDA C++ sources embedded in the binary
// (kernels/cuda/*.cuh), client-shipped CUDA source, and the NVRTC pipeline that compiles either
// for a device's architecture, cached in memory and on disk. Needs no GPU: NVRTC is loaded with
// dlopen (common/cuda/nvrtc_api.h) and compiles for any architecture. The CUDA backend
// (server/compute/cuda/cuda_server.cc) loads the images with the driver and launches them.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/kernel_metadata.h"
#include "kernels/builtin.h"
#include "kernels/cuda/builtin_args.h"

namespace cubed::kernels {

// A compiled kernel ready for cuModuleLoadData.
// Builtins of one family and dtype share one image (and cache_key): load it once per key and get
// each kernel's function by entry_point.
struct CompiledCudaKernel {
  std::string image;  // CUBIN (preferred) or PTX text, NUL-terminated when PTX.
  bool is_cubin = false;
  std::string entry_point;  // Mangled/lowered name to pass to cuModuleGetFunction.
  std::string cache_key;    // SHA-256 hex of source, headers, options, arch, NVRTC version.
  std::string log;          // NVRTC log (warnings), possibly empty.
};

struct CudaCompilerOptions {
  int arch_major = 9;  // Target compute capability, e.g. 9.0 -> sm_90.
  int arch_minor = 0;
  std::string cache_dir;             // On-disk cache (created on first write); empty = memory only.
  size_t max_memory_entries = 1024;  // Client kernels kept in memory (least recently used evicted).
  // Told, on the compiling thread, why a compiled kernel could not be stored in cache_dir (a
  // directory that cannot be made, a full disk, a record past the size limit); the kernel is
  // used anyway and a later process compiles it again. Empty: nobody is told.
  std::function<void(const absl::Status&)> on_cache_write_error;
};

// Compiles and caches CUDA kernels. Owned by one device's server-loop thread; not thread-safe.
// Images are CUBIN for the device's sm_XY; for a device newer than the loaded NVRTC knows, PTX
// for the newest architecture it supports (the driver JIT-compiles it).
class CudaKernelCompiler {
 public:
  // FAILED_PRECONDITION naming the library when NVRTC cannot be loaded, or naming the supported
  // architectures when the device's is older than all of them.
  static absl::StatusOr<std::unique_ptr<CudaKernelCompiler>> Create(CudaCompilerOptions options);
  ~CudaKernelCompiler();

  // The target NVRTC compiles for: "sm_90" (CUBIN) or "compute_120" (PTX).
  const std::string& target() const;

  // The kernel implementing builtin `call.name` with `num_buffers` buffers (max and min exist with
  // 2 and 3) for its dtype (and out_dtype for cast). Builtins are never evicted: the pointer stays
  // valid for the compiler's lifetime. NOT_FOUND for an unknown kernel; INVALID_ARGUMENT for a
  // wrong buffer count or unsupported dtype; INTERNAL with the NVRTC log if a builtin source
  // fails to compile (a bug, caught by the NVRTC CI test).
  absl::StatusOr<const CompiledCudaKernel*> Builtin(const BuiltinCall& call, size_t num_buffers);

  // Client-shipped CUDA C++ (`is_ptx` = false), compiled with `options` (an allowlist of NVRTC
  // options: macros, -std, fast-math and precision flags, -lineinfo, register limits; anything
  // else, e.g. an architecture or include path, is INVALID_ARGUMENT), with `entry` the __global__
  // function or a name expression such as "scale<float>". Or PTX (`is_ptx`), passed through after
  // checking it declares `.entry <entry>`. A compile error is INVALID_ARGUMENT carrying the NVRTC
  // log. The pointer stays valid until this entry is evicted: at least until the next Client call.
  absl::StatusOr<const CompiledCudaKernel*> Client(absl::string_view code, absl::string_view entry,
                                                   absl::Span<const std::string> options,
                                                   bool is_ptx);

  // Cache statistics (for metrics and tests). A builtin program counts once per compile or disk
  // read, then every Builtin call for a kernel already at hand is a hit.
  uint64_t hits() const;                  // Found in memory.
  uint64_t misses() const;                // Compiled with NVRTC (or, for PTX, first seen).
  uint64_t disk_hits() const;             // Read from cache_dir.
  uint64_t disk_write_failures() const;   // Compiled but not stored in cache_dir.
  uint64_t compile_microseconds() const;  // Spent in NVRTC (failed compiles too).

  class Impl;

 private:
  explicit CudaKernelCompiler(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Validates the call (ValidateBuiltin: same errors) and fills the by-value argument block of its
// launch: each buffer's byte size, rank, shape and strides (0 along size-1 dims), `count`, the
// fill value, axis, CUBED_CUDA_DENSE and the reduction/softmax variant. The caller then writes
// each buffer's device address into args.buffers[i].ptr, and the workspace BuiltinLaunchDims
// asks for into args.workspace.
absl::StatusOr<CudaBuiltinArgs> MakeCudaBuiltinArgs(const BuiltinCall& call,
                                                    absl::Span<const uint64_t> buffer_bytes);

// MakeCudaBuiltinArgs of a call already validated for buffers of `buffer_bytes`: `meta` is its
// decoded metadata as ValidatedCalls (kernels/validated_calls.h) or ValidateCall gave it. The
// errors left are INTERNAL (a catalogue row without a CUDA family).
absl::StatusOr<CudaBuiltinArgs> MakeValidatedCudaBuiltinArgs(
    const BuiltinCall& call, const KernelMetadata& meta, absl::Span<const uint64_t> buffer_bytes);

// Grid and block size for a builtin launch of `call` with `args` from MakeCudaBuiltinArgs
// (grid-stride kernels: any grid is correct; this one fills the device; at least one block even
// when there is no work, which the kernels then skip). `sm_count` is the device's
// multiprocessor count. Launch with exactly this block size (matmul needs 256 threads; softmax
// and a block per output size their blocks). Kernels use static shared memory only: shared_bytes
// is 0. Sets args->splits; when workspace_bytes > 0 the launch needs that much device memory at
// args->workspace, its counters zero (Note [Split reduction] in builtin_args.h: launches on one
// stream may share it, and leave the counters zero).
struct CudaLaunchDims {
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block[3] = {256, 1, 1};
  uint32_t shared_bytes = 0;
  uint64_t workspace_bytes = 0;
};
CudaLaunchDims BuiltinLaunchDims(const BuiltinCall& call, CudaBuiltinArgs* args, uint32_t sm_count);

}  // namespace cubed::kernels
