#pragma once

// Pieces of CudaServer::Execute that need no server state: the module cache, the run-time checks
// of a builtin launch's device addresses, and the parameter list of a client kernel
// (docs/kernel-abi.md, "CUDA kernels").

#include <cuda.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/builtin.h"
#include "kernels/cuda/builtin_args.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/kernel_def.h"

namespace cubed {

// Modules loaded from compiled images (cuModuleLoadData once per image), keyed by the image's
// cache key and entry point. At most `max_modules`; past that the least recently used is
// unloaded, after waiting for `stream` (a queued launch may still use it). Owned by the
// server-loop thread.
class CudaModuleCache {
 public:
  CudaModuleCache(CUstream stream, size_t max_modules = 512)
      : stream_(stream), max_modules_(max_modules) {}
  ~CudaModuleCache();  // Unloads every module (the stream has been synchronized).

  CudaModuleCache(const CudaModuleCache&) = delete;
  CudaModuleCache& operator=(const CudaModuleCache&) = delete;

  // The kernel's function. INVALID_ARGUMENT when the driver rejects the image (bad PTX, or PTX
  // for a newer architecture) or the entry point is not in it, with the driver's error.
  absl::StatusOr<CUfunction> Function(const kernels::CompiledCudaKernel& kernel);

  size_t size() const { return modules_.size(); }
  // Modules unloaded to make room so far: a CUfunction kept from an earlier Function call stays
  // valid while this is unchanged.
  uint64_t evictions() const { return evictions_; }
  // Called before a module is unloaded to make room (after the stream was synchronized), for
  // what keeps its functions beyond a launch (Note [Launch batches]: the batch's chains).
  void set_before_unload(absl::AnyInvocable<void()> before_unload) {
    before_unload_ = std::move(before_unload);
  }

 private:
  struct Entry {
    CUmodule module = nullptr;
    CUfunction function = nullptr;
    uint64_t last_use = 0;
  };
  CUstream stream_;
  size_t max_modules_;
  uint64_t clock_ = 0;
  uint64_t evictions_ = 0;
  absl::AnyInvocable<void()> before_unload_;
  absl::flat_hash_map<std::string, Entry> modules_;
};

// Checks the device addresses of a validated builtin launch, as RunBuiltinCpu checks host ones
// (docs/kernel-abi.md): each non-empty buffer aligned to its element size, and the output
// overlapping no input unless the kernel may run in place and the input is the very same memory
// and layout. `def` is the call's kernel as validation found it (no catalogue search a launch);
// `args` holds the pointers. INVALID_ARGUMENT naming the buffer.
absl::Status CheckBuiltinAddresses(const kernels::KernelDef& def, const kernels::BuiltinCall& call,
                                   const CudaBuiltinArgs& args);

// The parameters of a client kernel launch, in order (docs/kernel-abi.md, "CUDA kernels"): one
// device pointer per buffer, the metadata pointer, one by-value array per scalar group.
class ClientKernelParams {
 public:
  ClientKernelParams(absl::Span<const CUdeviceptr> buffers, CUdeviceptr metadata,
                     absl::Span<const kernels::ScalarGroup> scalars);

  ClientKernelParams(const ClientKernelParams&) = delete;
  ClientKernelParams& operator=(const ClientKernelParams&) = delete;

  // Sets the metadata pointer (uploaded once every check has passed).
  void set_metadata(CUdeviceptr metadata) { pointers_.back() = metadata; }
  // The `kernelParams` array for cuLaunchKernel; valid while this object lives.
  void** params() { return params_.data(); }
  // Bytes of each parameter, in order.
  const std::vector<uint64_t>& sizes() const { return sizes_; }
  // "2 buffers (8 bytes each), metadata (8), scalars f32[3] (12)": for error messages.
  std::string Describe() const;

 private:
  std::vector<CUdeviceptr> pointers_;  // Buffers, then metadata.
  std::vector<std::vector<uint8_t>> scalars_;
  std::vector<std::string> scalar_names_;
  std::vector<uint64_t> sizes_;
  std::vector<void*> params_;
};

// Compares the function's declared parameters (cuFuncGetParamInfo, driver 12.4+) with what the
// launch passes: INVALID_ARGUMENT naming the first mismatch. OK without checking on older
// drivers.
absl::Status CheckClientParams(CUfunction function, absl::string_view entry_point,
                               const ClientKernelParams& params);

}  // namespace cubed
