#pragma once

// CudaServer: the ComputeServer of one CUDA device. Everything runs on the device's primary
// context and ONE non-blocking stream, in submission order, so the server loop never waits for
// the device: copies and launches are queued and the call returns; reads, syncs and profile ends
// complete on the completion thread (cuda_completion.h). The loop waits only where the trait's
// meaning demands it: a dynamic cube count is read back (Note [Dynamic cube count] in
// cuda_server.cc), Free of a whole page waits for the stream (cuda_storage.h), and a transfer
// larger than the pinned staging pool waits for its own earlier chunks (cuda_staging.h).
//
// Note [Device lost]: a sticky CUDA error (illegal address, launch failure, ...; see
// IsStickyCudaError) seen by any call or event wait marks the server lost. From then on every
// request fails with UNAVAILABLE "device lost: <error>", callbacks already queued complete with
// it, and the device-lost callback runs once (the daemon turns health to NOT_SERVING and exits
// non-zero so its supervisor restarts it with a fresh context).

#include <cuda.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "common/cuda/cuda_context.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/validated_calls.h"
#include "server/compute/compute_server.h"
#include "server/compute/cuda/cublas_matmul.h"
#include "server/compute/cuda/cuda_completion.h"
#include "server/compute/cuda/cuda_launch.h"
#include "server/compute/cuda/cuda_launch_batch.h"
#include "server/compute/cuda/cuda_transfer.h"
#include "server/compute/cuda/cuda_workspace.h"
#include "storage/cuda/cuda_staging.h"
#include "storage/cuda/cuda_storage.h"

namespace cubed {

struct CudaServerOptions {
  uint32_t index = 0;            // The device's index in the daemon.
  int ordinal = 0;               // CUDA device ordinal (--device).
  uint64_t memory_limit = 0;     // Bytes; 0 = 90% of the device memory free at start.
  uint64_t max_allocation = 0;   // Bytes; 0 = the memory limit.
  std::string kernel_cache_dir;  // NVRTC's on-disk cache; empty = memory only.
  uint64_t staging_bytes = uint64_t{64} << 20;  // Most pinned host memory for transfers.
  size_t max_modules = 512;  // Loaded kernel modules kept (CudaModuleCache); tests make it small.
  // How long the completion thread polls before it sleeps (Note [Completion spin]).
  absl::Duration completion_spin = absl::ZeroDuration();
};

// Owned by the device's server-loop thread; the completion thread touches only the completion
// queue, the staging pool and the lost state. See the file comment.
class CudaServer final : public ComputeServer {
 public:
  using DeviceLostCallback = absl::AnyInvocable<void(const absl::Status&)>;

  // Retains the device's primary context, creates the stream, the pools and the NVRTC compiler.
  // FAILED_PRECONDITION saying why when there is no usable driver, device or NVRTC.
  static absl::StatusOr<std::unique_ptr<CudaServer>> Create(CudaServerOptions options);
  // How many CUDA devices this machine has (cuDeviceGetCount; --devices=all). FAILED_PRECONDITION
  // saying why when the driver cannot load.
  static absl::StatusOr<uint32_t> DeviceCount();
  // Waits for the stream, runs every pending callback and frees everything.
  ~CudaServer() override;

  // Called once, from the loop or the completion thread, when the device is lost (Note [Device
  // lost]); must not block. Set before the server is used.
  void SetDeviceLostCallback(DeviceLostCallback callback);
  // True once a sticky error was seen. Thread-safe.
  bool lost() const { return lost_.load(std::memory_order_acquire); }
  absl::Status Lost() const override { return LostStatus(); }
  // cuMemcpyDtoDAsync on the stream (cuda_copy.cc); returns once it is queued.
  absl::Status CopyWithin(const ResolvedBinding& from, const ResolvedBinding& to) override;

  const DeviceDescription& Description() const override { return description_; }
  // A dirty reservation (Note [Owner-tagged memory]) is zeroed with cuMemset*Async on the
  // stream, queued before the call returns (no host wait).
  absl::StatusOr<Allocation> Empty(uint64_t size, MemoryOwner owner) override;
  // Pitched rows: Note [Pitched tensors] in cuda_transfer.h.
  absl::StatusOr<Allocation> EmptyTensor(absl::Span<const uint64_t> shape, uint32_t elem_size,
                                         MemoryOwner owner) override;
  // Copied into pinned staging before returning; the upload is queued on the stream. When dirty,
  // the bytes the data does not cover (the tail; a pitched tensor's row padding) are zeroed.
  absl::StatusOr<Allocation> Create(absl::Span<const uint8_t> data, MemoryOwner owner) override;
  absl::StatusOr<Allocation> CreateTensor(absl::Span<const uint8_t> data,
                                          absl::Span<const uint64_t> shape, uint32_t elem_size,
                                          MemoryOwner owner) override;
  void Free(SliceId slice) override;
  // Copies the pieces' bytes into pinned staging (PlanDenseRangeWrite's pieces, gathered) and
  // queues the upload; `done` runs before returning, as the bytes are no longer needed then.
  using ComputeServer::Write;
  void Write(const ResolvedTensor& target, uint64_t dense_offset,
             absl::Span<const absl::Span<const uint8_t>> pieces, DoneCallback done) override;
  // Queue the device-to-host copies and return; `done` runs on the completion thread.
  void Read(std::vector<ResolvedBinding> bindings, std::vector<std::string>* out,
            DoneCallback done) override;
  // Note [Tensor copies] in cuda_transfer.h.
  void ReadTensor(std::vector<ResolvedTensor> tensors, std::vector<std::string>* out,
                  DoneCallback done) override;
  // As ReadTensor, into `out`; straight from the device into registered host memory.
  void ReadTensorInto(std::vector<ResolvedTensor> tensors, std::vector<absl::Span<uint8_t>> out,
                      DoneCallback done) override;
  // Page-locks `memory` (cuMemHostRegister; Note [Registered host memory] in cuda_server.cc), so
  // that copies between it and the device skip the staging buffers and run at pinned speed. When
  // the driver refuses (a lock limit, say) the memory still works through staging: a warning,
  // and OK.
  absl::Status RegisterHostMemory(absl::Span<uint8_t> memory) override;
  // Waits for the stream (copies queued from or into `memory` complete), then unregisters it.
  void UnregisterHostMemory(absl::Span<uint8_t> memory) override;
  // Through one pinned staging chunk (16 MiB), waited for on the loop thread batch by batch
  // (Note [Checkpoint staging] in cuda_checkpoint.cc).
  absl::Status ReadToHost(absl::Span<const ResolvedBinding> bindings,
                          HostChunkCallback sink) override;
  // `fill` writes into pinned staging chunks whose uploads are queued as each batch is filled.
  absl::StatusOr<std::vector<Allocation>> CreateFromHost(absl::Span<const uint64_t> sizes,
                                                         MemoryOwner owner,
                                                         HostChunkCallback fill) override;
  // The binding's device pointer and the page's IPC handle (empty where CUDA IPC is refused).
  absl::StatusOr<ResourceDescription> GetResource(const ResolvedBinding& binding) override;
  // Note [Imported memory]: opens a CUDA IPC handle of another process's allocation on this GPU
  // (cuda_import.cc); Free of its slice waits for the stream, then closes the mapping.
  absl::StatusOr<Allocation> Import(const ImportSource& source) override;
  ImportedMemory Imports() const override;
  // Builtin: ValidateBuiltin, address checks, then f32/f64 matmul through cuBLAS where it can
  // (cublas_matmul.h), everything else NVRTC (cached) with one by-value argument. cuda_source
  // and ptx: docs/kernel-abi.md, "CUDA kernels". Returns once the launch is queued.
  absl::Status Execute(const Launch& launch) override;
  // A recorded graph of builtin launches with static counts replays as one CUDA graph launch,
  // captured again when its parameters moved (Note [CUDA graph replays] in cuda_graph.cc); any
  // other graph launch by launch.
  absl::Status ExecuteGraph(absl::Span<const Launch> launches, absl::Span<const SliceId> parameters,
                            std::unique_ptr<GraphExecutable>& executable) override;
  // Builtin launches of the run are held back and sent as one graph replay (Note [Launch
  // batches] in cuda_launch_batch.h); a launch that cannot be sent then makes the device lost.
  void BeginLaunchBatch() override;
  void EndLaunchBatch() override;
  // Every command is on the stream when its call returns (launches held back in a batch are
  // sent first).
  absl::Status Flush() override;
  void Sync(DoneCallback done) override;
  // The pools' usage; bytes_reserved also counts the launch workspace (cuda_workspace.h).
  MemoryUsage Usage() const override;
  void Cleanup() override;
  // Device time between two events on the stream (idle gaps included), measured when the end
  // event completes; EndProfile's `done` runs on the completion thread.
  absl::StatusOr<ProfileToken> StartProfile() override;
  void EndProfile(ProfileToken token, DurationCallback done) override;
  // A timing event recorded on the stream (0 when it cannot be: the trace then lacks it);
  // TimeMarks' `done` runs on the completion thread.
  uint64_t DeviceMark() override;
  void TimeMarks(std::vector<uint64_t> marks, MarksCallback done) override;
  // The NVRTC compiler's cache counters.
  KernelCacheStats KernelCache() const override;
  LaunchBatchStats LaunchBatches() const override;

  // For tests: the pinned staging pool, the NVRTC compiler, the cuBLAS matmul runner and the
  // launch batch (null where the driver cannot batch).
  const PinnedStagingPool& staging() const { return *staging_; }
  const CudaLaunchBatch* launch_batch() const { return launch_batch_.get(); }
  kernels::CudaKernelCompiler& compiler() { return *compiler_; }
  const CublasMatmul& cublas() const { return *cublas_; }

 private:
  struct PendingRead;

  explicit CudaServer(CudaServerOptions options) : options_(std::move(options)) {}
  absl::Status Init();
  void Describe(uint64_t free_memory);

  // UNAVAILABLE "device lost: ..." once lost, else OK.
  absl::Status LostStatus() const;
  // Marks the server lost when `status` is a device-lost error; returns `status`. Thread-safe.
  absl::Status Check(absl::Status status);
  absl::StatusOr<CUdeviceptr> DevicePointer(const ResolvedBinding& binding) const;
  // Imported slices (Note [Imported memory]): the binding's address, and the unmapping.
  absl::StatusOr<CUdeviceptr> ImportedPointer(const ResolvedBinding& binding) const;
  void FreeImport(SliceId slice);

  // A reserved slice: its device address and extent, and whether it must be zeroed.
  struct Reserved {
    SliceId slice = 0;
    CUdeviceptr ptr = 0;
    uint64_t extent = 0;
    bool dirty = false;
  };
  // Reserves `size` bytes for `owner` (Note [Owner-tagged memory]); zeroes nothing.
  absl::StatusOr<Reserved> Reserve(uint64_t size, MemoryOwner owner);
  // Queues the zeroing of `bytes` bytes at `ptr` on the stream.
  absl::Status ZeroAsync(CUdeviceptr ptr, uint64_t bytes);
  // Queues the zeroing of the bytes of `r` outside a tensor's rows: `rows` rows of `width` bytes
  // every `pitch` bytes from the slice's start (a contiguous buffer: one row).
  absl::Status ZeroOutsideRows(const Reserved& r, uint64_t width, uint64_t pitch, uint64_t rows);

  // One rectangular copy on the stream between device memory (strided side) and host memory
  // (dense side, pinned).
  absl::Status Copy2D(CUdeviceptr device, uint64_t pitch, uint8_t* host, uint64_t width,
                      uint64_t height, bool to_device);
  // Whether [data, data + size) lies inside one registered range (Note [Registered host memory]).
  bool IsRegistered(const uint8_t* data, uint64_t size) const;
  // ReadTensor / ReadTensorInto: packs tensors[i] into dst[i] (its dense bytes).
  void ReadTensorsTo(const std::vector<ResolvedTensor>& tensors, const std::vector<uint8_t*>& dst,
                     DoneCallback done);
  // Uploads `data` (dense) into the layout `pieces` describe at `base`; straight from `data` when
  // it is registered (then it must stay unchanged until the copy completed), else through
  // staging (then `data` may change once Upload returned).
  absl::Status Upload(CUdeviceptr base, absl::Span<const uint8_t> data,
                      absl::Span<const CopyPiece> pieces);
  // The same with the dense bytes gathered from `data`'s pieces, one after the other (always
  // through staging when there is more than one).
  absl::Status Upload(CUdeviceptr base, absl::Span<const absl::Span<const uint8_t>> data,
                      absl::Span<const CopyPiece> pieces);
  // Queues the download of `pieces` from `base` into `dst` (dense); errors go to `op`.
  absl::Status Download(CUdeviceptr base, absl::Span<const CopyPiece> pieces, uint8_t* dst,
                        const std::shared_ptr<PendingRead>& op);
  // Sizes each of `out` for its binding (assigned anew) and calls `copy(device address,
  // destination, bytes)` for each in order; the first error of either, and stops there.
  absl::Status ForEachReadTarget(
      const std::vector<ResolvedBinding>& bindings, std::vector<std::string>* out,
      absl::FunctionRef<absl::Status(CUdeviceptr, uint8_t*, uint64_t)> copy);
  // Runs `done` with the read's status after everything queued for it.
  void FinishRead(std::shared_ptr<PendingRead> op, absl::Status loop_status, bool queued_any);
  // Reads `bindings` into `out` on this thread and runs `done` (moved from) when they are small
  // and the device and the completion queue are idle; false, with nothing done, otherwise (Note
  // [Inline small reads] in cuda_read.cc). `seen_idle`: stream_seen_idle_ as Read found it (then
  // the stream is not queried).
  bool ReadInline(const std::vector<ResolvedBinding>& bindings, std::vector<std::string>* out,
                  DoneCallback& done, bool seen_idle);

  // A capture in progress (Note [CUDA graph replays]): what it found it needs.
  struct Capture {
    uint64_t workspace_bytes = 0;  // The launch workspace it must find grown.
  };
  // Captures `launches` into a CUDA graph and instantiates it into `*exec` (or updates `*exec`
  // in place). Nothing runs. `grown`: whether the workspace was grown for this capture already.
  absl::Status CaptureGraph(absl::Span<const Launch> launches, CUgraphExec* exec, bool grown);

  absl::Status ExecuteBuiltin(const Launch& launch);
  // Note [Prepared builtin launches] in cuda_execute.cc.
  struct PreparedBuiltin {
    bool ready = false;  // The fields below are set.
    bool matmul = false;
    CudaBuiltinArgs args;  // Without buffer addresses and workspace.
    kernels::CudaLaunchDims dims;
    bool launched = false;            // Launched once by itself: later launches may be batched.
    CUfunction function = nullptr;    // Once found; valid while the evictions below hold.
    uint64_t function_evictions = 0;  // modules_->evictions() when `function` was found.
  };
  using BuiltinCalls = kernels::ValidatedCallsWith<PreparedBuiltin>;
  // Sends the launches held back (Note [Launch batches]); OK when none are. Everything that
  // reaches the stream or frees memory, other than a launch the batch takes, calls this (or
  // LaunchHeldBackOrLog) first: a no-op outside a batch, and inside one a guard, since only
  // Execute and DeviceMark are called there.
  // Also forgets that the stream was seen idle (Note [Inline small reads]): the same calls are
  // the ones that may queue work on it.
  absl::Status LaunchHeldBack() {
    stream_seen_idle_ = false;
    return launch_batch_ == nullptr || launch_batch_->empty() ? absl::OkStatus()
                                                              : SendLaunchBatch();
  }
  absl::Status SendLaunchBatch();
  // LaunchHeldBack for calls that cannot answer with its error: logs it (the device is lost
  // then, and the calls fail by that).
  void LaunchHeldBackOrLog();
  // The function of a builtin kernel (Note [Builtin launch cache] in cuda_execute.cc).
  absl::StatusOr<CUfunction> BuiltinFunction(const kernels::BuiltinCall& call, size_t num_buffers);
  // Fills `kept->prepared` (Note [Prepared builtin launches]); INTERNAL as
  // MakeValidatedCudaBuiltinArgs, leaving it not ready.
  absl::Status PrepareBuiltin(const kernels::BuiltinCall& call,
                              absl::Span<const uint64_t> buffer_bytes, BuiltinCalls::Kept& kept);
  // Empties builtin_functions_ once the module cache unloaded a module since it was filled.
  void DropStaleBuiltinFunctions();
  absl::Status ExecuteClient(const Launch& launch);
  // Note [Dynamic cube count]: reads and checks the three u32 with a stream sync.
  absl::Status ReadCubeCount(const ResolvedBinding& binding, uint32_t xyz[3]);
  // Copies `words` to the metadata ring and returns its device address (0 when empty).
  absl::StatusOr<CUdeviceptr> UploadMetadata(absl::Span<const uint32_t> words);

  CudaServerOptions options_;
  DeviceDescription description_;
  std::unique_ptr<CudaContext> context_;
  CUstream stream_ = nullptr;
  uint32_t sm_count_ = 0;
  uint64_t max_pitch_ = 0;
  uint32_t max_dynamic_shared_ = 0;
  std::unique_ptr<CudaStorage> storage_;
  std::unique_ptr<MemoryManager> memory_;
  std::unique_ptr<PinnedStagingPool> staging_;
  // Note [Inline small reads]: the inline reads' pinned bytes (kInlineReadBytes, made at the first
  // one; null until then or where the driver refuses it). Loop thread only.
  uint8_t* inline_read_buffer_ = nullptr;
  // Whether the stream has had nothing queued since an inline read's sync left it idle (Note
  // [Inline small reads] in cuda_read.cc; cleared by Execute and LaunchHeldBack). Loop thread.
  bool stream_seen_idle_ = false;
  std::unique_ptr<CudaCompletionQueue> completion_;
  std::unique_ptr<CudaModuleCache> modules_;
  std::unique_ptr<kernels::CudaKernelCompiler> compiler_;
  // Note [cuBLAS matmul] in cublas_matmul.h; declines everything when cuBLAS did not load or
  // CUBED_DISABLE_CUBLAS is set.
  std::unique_ptr<CublasMatmul> cublas_;

  // Imported slices (Note [Imported memory]): the opened mapping's base (what
  // cuIpcCloseMemHandle takes), the range's first byte and its size.
  struct Imported {
    CUdeviceptr base = 0;
    CUdeviceptr ptr = 0;
    uint64_t size = 0;
  };
  absl::flat_hash_map<SliceId, Imported> imports_;
  uint64_t next_import_ = 1;

  // Registered host memory by start address: its size (Note [Registered host memory]).
  std::map<const uint8_t*, uint64_t> registered_;

  // Note [Builtin launch cache] in cuda_execute.cc.
  struct BuiltinKey {
    std::string name;
    ElemType dtype;
    ElemType out_dtype;
    ElemType index_dtype;  // Gather's kernel depends on it; the others' do not.
    size_t num_buffers;
    bool operator==(const BuiltinKey& o) const {
      return name == o.name && dtype == o.dtype && out_dtype == o.out_dtype &&
             index_dtype == o.index_dtype && num_buffers == o.num_buffers;
    }
    template <typename H>
    friend H AbslHashValue(H h, const BuiltinKey& k) {
      return H::combine(std::move(h), k.name, k.dtype, k.out_dtype, k.index_dtype, k.num_buffers);
    }
  };
  absl::flat_hash_map<BuiltinKey, CUfunction> builtin_functions_;
  // Builtin calls validated lately (Note [Validated calls]); ExecuteBuiltin's, on the loop.
  BuiltinCalls builtin_calls_;
  uint64_t builtin_functions_evictions_ = 0;  // modules_->evictions() when last valid.
  uint64_t builtin_function_hits_ = 0;

  // Note [Launch batches]: null where the driver lacks the graph calls.
  std::unique_ptr<CudaLaunchBatch> launch_batch_;
  bool launch_batch_open_ = false;  // Between BeginLaunchBatch and EndLaunchBatch.

  Capture* capture_ = nullptr;                // Set while CaptureGraph captures.
  std::unique_ptr<CudaWorkspace> workspace_;  // Scratch of builtin launches (split reductions).
  CUdeviceptr metadata_ring_ = 0;             // Note [Metadata ring] in cuda_execute.cc.
  uint64_t metadata_ring_head_ = 0;

  absl::flat_hash_map<ProfileToken, CUevent> profiles_;  // Token -> start event.
  ProfileToken next_profile_ = 1;
  absl::flat_hash_map<uint64_t, CUevent> marks_;  // DeviceMark id -> its event.
  uint64_t next_mark_ = 1;

  std::atomic<bool> lost_{false};
  mutable absl::Mutex lost_mu_;
  absl::Status lost_status_ ABSL_GUARDED_BY(lost_mu_);
  DeviceLostCallback on_lost_ ABSL_GUARDED_BY(lost_mu_);
};

}  // namespace cubed
