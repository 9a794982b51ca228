// CudaServer::Execute: builtin kernels and client-shipped CUDA kernels.

#include <algorithm>
#include <cstring>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/cuda/cuda_driver.h"
#include "common/status_macros.h"
#include "server/compute/cuda/cuda_server.h"

namespace cubed {
namespace {

// Note [Metadata ring]: the u32 metadata of client kernels goes to the device through a 1 MiB
// ring of device memory (allocated at the first client launch, outside the pools and their
// memory limit). Slot reuse needs no fence: the copy that overwrites a slot is queued on the one
// stream after every kernel that read the slot's old contents.
constexpr uint64_t kMetadataRingBytes = uint64_t{1} << 20;

// Client kernels' launch errors that their code or launch parameters cause.
bool IsClientLaunchError(CUresult r) {
  return r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES ||
         r == CUDA_ERROR_INVALID_HANDLE || r == CUDA_ERROR_NOT_SUPPORTED;
}

}  // namespace

absl::Status CudaServer::Execute(const Launch& launch) {
  stream_seen_idle_ = false;  // Note [Inline small reads]: a held-back launch is queued work too.
  RETURN_IF_ERROR(LostStatus());
  RETURN_IF_ERROR(context_->MakeCurrent());
  if (!launch.Kernel().is_builtin) {
    RETURN_IF_ERROR(LaunchHeldBack());  // Note [Launch batches]: client kernels go alone.
    return Check(ExecuteClient(launch));
  }
  return Check(ExecuteBuiltin(launch));
}

// Note [Dynamic cube count]: CUDA has no launch whose grid is read from device memory, so the
// three u32 are copied back (through pinned staging) and the server loop waits for the stream to
// reach them: a dynamic launch costs one full stream sync, i.e. it waits for all work queued
// before it (as CubeCL's CUDA runtime does). Builtin kernels cover their output whatever the
// count, so for them the count is only checked, as the CPU backend does.
absl::Status CudaServer::ReadCubeCount(const ResolvedBinding& binding, uint32_t xyz[3]) {
  ASSIGN_OR_RETURN(CUdeviceptr ptr, DevicePointer({binding.slice, binding.offset, 12}));
  ASSIGN_OR_RETURN(PinnedStagingPool::Buffer buffer, staging_->Acquire(12));
  absl::Status status = CU_STATUS(Cu().MemcpyDtoHAsync(buffer.data, ptr, 12, stream_));
  if (status.ok()) status = CU_STATUS(Cu().StreamSynchronize(stream_));
  if (status.ok()) std::memcpy(xyz, buffer.data, 12);
  staging_->Release(buffer);
  RETURN_IF_ERROR(status);
  for (int i = 0; i < 3; ++i) {
    if (xyz[i] == 0 || xyz[i] > description_.max_cube_count[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat("dynamic cube count: ", std::string(1, "xyz"[i]), " = ", xyz[i],
                       " read from the binding is outside 1 .. ", description_.max_cube_count[i]));
    }
  }
  return absl::OkStatus();
}

// Note [Builtin launch cache]: the function of each builtin (name, dtypes, buffer count) is kept
// once found, so that a launch costs one small hash lookup instead of the catalogue search, the
// compiler's lookup and the module cache's (each building a string key). The module cache may
// unload a module to make room: its eviction count changing empties this cache. A cache hit
// counts as a kernel cache hit in the stats.
void CudaServer::DropStaleBuiltinFunctions() {
  if (modules_->evictions() == builtin_functions_evictions_) return;
  builtin_functions_.clear();
  builtin_functions_evictions_ = modules_->evictions();
}

absl::StatusOr<CUfunction> CudaServer::BuiltinFunction(const kernels::BuiltinCall& call,
                                                       size_t num_buffers) {
  DropStaleBuiltinFunctions();
  BuiltinKey key{call.name, call.dtype, call.out_dtype, call.index_dtype, num_buffers};
  if (auto it = builtin_functions_.find(key); it != builtin_functions_.end()) {
    ++builtin_function_hits_;
    return it->second;
  }
  ASSIGN_OR_RETURN(const kernels::CompiledCudaKernel* compiled,
                   compiler_->Builtin(call, num_buffers));
  ASSIGN_OR_RETURN(CUfunction function, modules_->Function(*compiled));
  DropStaleBuiltinFunctions();  // Loading it may have made room.
  builtin_functions_.emplace(std::move(key), function);
  return function;
}

// Note [Prepared builtin launches]: everything a builtin launch needs that follows from the
// call and its buffers' sizes alone (the argument block but for the addresses, the grid, the
// function) is derived once and kept with the validated call (Note [Prepared launches] in
// kernels/validated_calls.h); an equal launch copies the block and writes its addresses. Deriving
// them every launch was about a fifth of cubed's own share of the loop per tiny launch
// (MakeValidatedCudaBuiltinArgs, BuiltinLaunchDims, the function's key; GPU run 84). Only the
// checks that read addresses (alignment, overlap) and the workspace stay per launch.
absl::Status CudaServer::PrepareBuiltin(const kernels::BuiltinCall& call,
                                        absl::Span<const uint64_t> buffer_bytes,
                                        BuiltinCalls::Kept& kept) {
  PreparedBuiltin& p = kept.prepared;
  ASSIGN_OR_RETURN(p.args, kernels::MakeValidatedCudaBuiltinArgs(call, kept.meta, buffer_bytes));
  p.dims = kernels::BuiltinLaunchDims(call, &p.args, sm_count_);
  p.matmul = call.name == "matmul";
  p.function = nullptr;
  p.ready = true;
  return absl::OkStatus();
}

absl::Status CudaServer::ExecuteBuiltin(const Launch& launch) {
  const kernels::BuiltinCall& call = launch.Kernel().builtin;
  absl::InlinedVector<uint64_t, CUBED_CUDA_MAX_BUFFERS> sizes;
  for (const ResolvedBinding& b : launch.buffers) sizes.push_back(b.size);
  ASSIGN_OR_RETURN(BuiltinCalls::Kept * kept, builtin_calls_.Validate(call, sizes));
  PreparedBuiltin& prepared = kept->prepared;
  if (!prepared.ready) RETURN_IF_ERROR(PrepareBuiltin(call, sizes, *kept));
  const bool function_loaded =
      prepared.function != nullptr && prepared.function_evictions == modules_->evictions();
  // Note [Launch batches]: held back only when it needs nothing but the stream and was accepted
  // by itself before; otherwise what was held back goes first (loading a module may unload one
  // a held-back launch uses; cuBLAS, the workspace and a dynamic count reach the stream).
  const bool hold = launch_batch_open_ && prepared.launched && function_loaded &&
                    !prepared.matmul && !launch.count.dynamic &&
                    prepared.dims.workspace_bytes == 0 && capture_ == nullptr;
  if (!hold) RETURN_IF_ERROR(LaunchHeldBack());
  CudaBuiltinArgs args = prepared.args;
  for (size_t i = 0; i < launch.buffers.size(); ++i) {
    ASSIGN_OR_RETURN(args.buffers[i].ptr, DevicePointer(launch.buffers[i]));
  }
  RETURN_IF_ERROR(CheckBuiltinAddresses(*kept->def, call, args));
  if (launch.count.dynamic) {
    uint32_t xyz[3];
    RETURN_IF_ERROR(ReadCubeCount(launch.count.binding, xyz));
  }
  if (prepared.matmul) {
    ASSIGN_OR_RETURN(const bool ran, cublas_->Run(call.dtype, call.allow_tf32, args));
    if (ran) return absl::OkStatus();
  }
  if (!function_loaded) {
    ASSIGN_OR_RETURN(prepared.function, BuiltinFunction(call, sizes.size()));
    prepared.function_evictions = modules_->evictions();
  } else {
    ++builtin_function_hits_;  // A kernel cache hit, as BuiltinFunction's own.
  }
  const kernels::CudaLaunchDims& dims = prepared.dims;
  if (hold) {
    if (launch_batch_->full()) RETURN_IF_ERROR(SendLaunchBatch());
    launch_batch_->Add(prepared.function, dims, args);
    return absl::OkStatus();
  }
  if (dims.workspace_bytes > 0) {
    if (capture_ != nullptr && dims.workspace_bytes > workspace_->bytes()) {
      // Growing waits for the stream, which a capture cannot (Note [CUDA graph replays]).
      capture_->workspace_bytes = std::max(capture_->workspace_bytes, dims.workspace_bytes);
      return absl::AbortedError("the launch workspace must grow before this launch is captured");
    }
    ASSIGN_OR_RETURN(args.workspace, workspace_->Get(dims.workspace_bytes));
  }
  void* params[] = {&args};
  CU_RETURN_IF_ERROR(Cu().LaunchKernel(prepared.function, dims.grid[0], dims.grid[1], dims.grid[2],
                                       dims.block[0], dims.block[1], dims.block[2],
                                       dims.shared_bytes, stream_, params, nullptr));
  if (capture_ == nullptr) prepared.launched = true;  // A captured one is not launched yet.
  return absl::OkStatus();
}

absl::StatusOr<CUdeviceptr> CudaServer::UploadMetadata(absl::Span<const uint32_t> words) {
  if (words.empty()) return CUdeviceptr{0};
  const uint64_t bytes = words.size() * sizeof(uint32_t);
  if (bytes > kMetadataRingBytes) {
    return absl::InvalidArgumentError(absl::StrCat("bindings.metadata: ", words.size(),
                                                   " words; at most ", kMetadataRingBytes / 4));
  }
  if (metadata_ring_ == 0) CU_RETURN_IF_ERROR(Cu().MemAlloc(&metadata_ring_, kMetadataRingBytes));
  const uint64_t slot = (bytes + 255) / 256 * 256;
  if (metadata_ring_head_ + slot > kMetadataRingBytes) metadata_ring_head_ = 0;
  const CUdeviceptr ptr = metadata_ring_ + metadata_ring_head_;
  metadata_ring_head_ += slot;
  const CopyPiece piece{0, bytes, bytes, 1, 0};
  RETURN_IF_ERROR(Upload(ptr,
                         absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(words.data()), bytes),
                         absl::MakeConstSpan(&piece, 1)));
  return ptr;
}

absl::Status CudaServer::ExecuteClient(const Launch& launch) {
  const CudaKernel& k = launch.Kernel().cuda;
  // Request conversion carries a client kernel's metadata and scalars in the builtin call.
  const kernels::BuiltinCall& bindings = launch.Kernel().builtin;
  absl::StatusOr<const kernels::CompiledCudaKernel*> compiled =
      compiler_->Client(k.code, k.entry_point, k.options, k.is_ptx);
  if (!compiled.ok()) return compiled.status();
  ASSIGN_OR_RETURN(CUfunction function, modules_->Function(**compiled));

  const uint64_t threads = uint64_t{k.cube_dim[0]} * k.cube_dim[1] * k.cube_dim[2];
  int max_threads = 0, static_shared = 0;
  CU_RETURN_IF_ERROR(
      Cu().FuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, function));
  CU_RETURN_IF_ERROR(
      Cu().FuncGetAttribute(&static_shared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, function));
  if (threads > static_cast<uint64_t>(max_threads)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cube_dim: ", k.cube_dim[0], " x ", k.cube_dim[1], " x ", k.cube_dim[2], " = ",
                     threads, " units, but kernel '", k.entry_point, "' can run at most ",
                     max_threads, " per cube on this device (registers)"));
  }
  const uint64_t shared = k.shared_memory_bytes;
  if (shared + static_cast<uint64_t>(static_shared) > max_dynamic_shared_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared_memory_bytes: ", shared, " dynamic + ", static_shared, " static bytes exceed the ",
        max_dynamic_shared_, " bytes of shared memory a cube may use on this device"));
  }
  if (shared > 48 * 1024) {
    CU_RETURN_IF_ERROR(Cu().FuncSetAttribute(
        function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(shared)));
  }
  std::vector<CUdeviceptr> buffers;
  for (const ResolvedBinding& b : launch.buffers) {
    ASSIGN_OR_RETURN(CUdeviceptr ptr, DevicePointer(b));
    buffers.push_back(ptr);
  }
  ClientKernelParams params(buffers, 0, bindings.scalars);
  RETURN_IF_ERROR(CheckClientParams(function, k.entry_point, params));
  uint32_t count[3] = {launch.count.x, launch.count.y, launch.count.z};
  if (launch.count.dynamic) RETURN_IF_ERROR(ReadCubeCount(launch.count.binding, count));
  ASSIGN_OR_RETURN(CUdeviceptr metadata, UploadMetadata(bindings.metadata));
  params.set_metadata(metadata);
  const CUresult r = Cu().LaunchKernel(function, count[0], count[1], count[2], k.cube_dim[0],
                                       k.cube_dim[1], k.cube_dim[2], static_cast<unsigned>(shared),
                                       stream_, params.params(), nullptr);
  if (r != CUDA_SUCCESS && IsClientLaunchError(r)) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel '", k.entry_point, "' cannot launch: ", CU_STATUS(r).message()));
  }
  CU_RETURN_IF_ERROR(r);
  // Client code may fault: wait for it on the completion thread, so that a lost device is noticed
  // (Note [Device lost]) even if no later call waits for the stream.
  completion_->After(stream_, [](absl::Status) {});
  return absl::OkStatus();
}

}  // namespace cubed
