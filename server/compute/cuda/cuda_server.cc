#include "server/compute/cuda/cuda_server.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checked_math.h"
#include "common/cuda/cuda_driver.h"
#include "common/status_macros.h"
#include "kernels/cuda/builtin_catalog.h"
#include "spdlog/spdlog.h"

namespace cubed {

absl::StatusOr<uint32_t> CudaServer::DeviceCount() {
  RETURN_IF_ERROR(LoadCudaDriver().status());
  int count = 0;
  CU_RETURN_IF_ERROR(Cu().DeviceGetCount(&count));
  return static_cast<uint32_t>(count);
}

absl::StatusOr<std::unique_ptr<CudaServer>> CudaServer::Create(CudaServerOptions options) {
  std::unique_ptr<CudaServer> server(new CudaServer(std::move(options)));
  RETURN_IF_ERROR(server->Init());
  return server;
}

absl::Status CudaServer::Init() {
  ASSIGN_OR_RETURN(context_, CudaContext::Retain(options_.ordinal));
  CU_RETURN_IF_ERROR(Cu().StreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
  const CUdevice dev = context_->device();
  int sm = 0, pitch = 0, shared = 0, major = 0, minor = 0;
  CU_RETURN_IF_ERROR(Cu().DeviceGetAttribute(&sm, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  CU_RETURN_IF_ERROR(Cu().DeviceGetAttribute(&pitch, CU_DEVICE_ATTRIBUTE_MAX_PITCH, dev));
  CU_RETURN_IF_ERROR(
      Cu().DeviceGetAttribute(&shared, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev));
  CU_RETURN_IF_ERROR(
      Cu().DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  CU_RETURN_IF_ERROR(
      Cu().DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
  sm_count_ = static_cast<uint32_t>(sm);
  max_pitch_ = static_cast<uint64_t>(pitch);
  max_dynamic_shared_ = static_cast<uint32_t>(shared);

  size_t free = 0, total = 0;
  CU_RETURN_IF_ERROR(Cu().MemGetInfo(&free, &total));
  CudaStorageOptions storage;
  storage.context = context_.get();
  storage.stream = stream_;
  storage.on_error = [this](absl::Status s) { Check(std::move(s)).IgnoreError(); };
  storage_ = std::make_unique<CudaStorage>(std::move(storage));
  MemoryManagerOptions mm;
  mm.memory_limit =
      options_.memory_limit != 0 ? std::min<uint64_t>(options_.memory_limit, total) : free / 10 * 9;
  mm.max_allocation = options_.max_allocation != 0
                          ? std::min(options_.max_allocation, mm.memory_limit)
                          : mm.memory_limit;
  memory_ = std::make_unique<MemoryManager>(storage_.get(), mm);
  staging_ = std::make_unique<PinnedStagingPool>(context_.get(), options_.staging_bytes);
  completion_ = std::make_unique<CudaCompletionQueue>(
      context_.get(), [this](absl::Status s) { Check(std::move(s)).IgnoreError(); },
      options_.completion_spin);
  modules_ = std::make_unique<CudaModuleCache>(stream_, options_.max_modules);

  kernels::CudaCompilerOptions compiler;
  compiler.arch_major = major;
  compiler.arch_minor = minor;
  compiler.cache_dir = options_.kernel_cache_dir;
  // Warned at the 1st, 2nd, 4th, 8th ... failure: a full disk does not flood the log.
  compiler.on_cache_write_error = [ordinal = options_.ordinal,
                                   failures = uint64_t{0}](const absl::Status& s) mutable {
    ++failures;
    if ((failures & (failures - 1)) != 0) return;
    spdlog::warn(
        "cuda device {}: kernel cache: a compiled kernel was not stored ({} so far): {}; "
        "kernels still run, and a later daemon compiles them again",
        ordinal, failures, s.ToString());
  };
  ASSIGN_OR_RETURN(compiler_, kernels::CudaKernelCompiler::Create(compiler));

  // cuBLAS is optional: loaded (dlopen only) once per process; CUBED_DISABLE_CUBLAS=1 (any value
  // but "" and "0") keeps this server on the NVRTC matmul kernel.
  const char* disable = std::getenv("CUBED_DISABLE_CUBLAS");
  const CublasApi* cublas = nullptr;
  if (disable != nullptr && disable[0] != '\0' && std::strcmp(disable, "0") != 0) {
    spdlog::info(
        "cuda device {}: CUBED_DISABLE_CUBLAS is set: builtin matmul uses cubed's own "
        "kernel",
        options_.ordinal);
  } else if (absl::StatusOr<const CublasApi*> loaded = LoadCublas(); loaded.ok()) {
    cublas = *loaded;
  }
  cublas_ = std::make_unique<CublasMatmul>(cublas, stream_);
  workspace_ = std::make_unique<CudaWorkspace>(stream_);
  if (CudaLaunchBatch::Supported()) {
    launch_batch_ = std::make_unique<CudaLaunchBatch>(stream_);
    // A chain's nodes may name the functions of a module about to be unloaded.
    modules_->set_before_unload([batch = launch_batch_.get()] { batch->DropChains(); });
  }

  DeviceDescription& d = description_;
  d.backend = DeviceDescription::Backend::kCuda;
  d.index = options_.index;
  char name[256] = {};
  CU_RETURN_IF_ERROR(Cu().DeviceGetName(name, sizeof(name) - 1, dev));
  d.name = name;
  d.memory_total = total;
  d.memory_limit = mm.memory_limit;
  d.alignment = static_cast<uint32_t>(memory_->alignment());
  d.max_allocation = mm.max_allocation;
  const CUdevice_attribute grid[3] = {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X,
                                      CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
                                      CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z};
  const CUdevice_attribute block[3] = {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X,
                                       CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,
                                       CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z};
  for (int i = 0; i < 3; ++i) {
    int g = 0, b = 0;
    CU_RETURN_IF_ERROR(Cu().DeviceGetAttribute(&g, grid[i], dev));
    CU_RETURN_IF_ERROR(Cu().DeviceGetAttribute(&b, block[i], dev));
    d.max_cube_count[i] = static_cast<uint32_t>(g);
    d.max_cube_dim[i] = static_cast<uint32_t>(b);
  }
  int threads = 0;
  CU_RETURN_IF_ERROR(
      Cu().DeviceGetAttribute(&threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, dev));
  d.max_units_per_cube = static_cast<uint32_t>(threads);
  d.compute_units = sm_count_;
  d.compute_capability = absl::StrCat(major, ".", minor);
  CUuuid uuid;
  CU_RETURN_IF_ERROR(Cu().DeviceGetUuid(&uuid, dev));
  d.uuid = FormatGpuUuid(uuid);
  d.elem_types.assign(std::begin(kAllElemTypes), std::end(kAllElemTypes));
  // f16 and bf16 matmuls run on tensor cores through cuBLAS (f32 accumulation) when it loaded,
  // else on cubed's own kernel with the same accumulation.
  d.matmul_types = kernels::BuiltinMatmulTypes();
  // An f32 matmul that allows TF32 runs on its tensor cores (sm_80 and later) through cuBLAS.
  if (cublas != nullptr && major >= 8) d.matmul_types.push_back("tf32*tf32+f32");
  for (const kernels::CudaBuiltinSignature& s : kernels::CudaBuiltinSignatures()) {
    d.builtin_kernels.push_back(s.name);
  }
  std::sort(d.builtin_kernels.begin(), d.builtin_kernels.end());
  d.builtin_kernels.erase(std::unique(d.builtin_kernels.begin(), d.builtin_kernels.end()),
                          d.builtin_kernels.end());
  d.features = {"builtin_kernels", "cuda_source",     "ptx",        "dynamic_cube_count",
                "profiling",       "pitched_tensors", "ipc_handles"};
  if (cublas != nullptr) d.features.push_back("cublas_matmul");
  spdlog::info("cuda device {}: {} (sm_{}{}, {} SMs, {} MiB, {} MiB free), driver {}",
               options_.ordinal, d.name, major, minor, sm_count_, total >> 20, free >> 20,
               Cu().version);
  return absl::OkStatus();
}

CudaServer::~CudaServer() {
  if (context_ == nullptr) return;
  if (context_->MakeCurrent().ok() && stream_ != nullptr) Cu().StreamSynchronize(stream_);
  cublas_.reset();  // Its handle frees device memory: the context is current.
  if (launch_batch_ != nullptr && !launch_batch_->empty()) {  // EndLaunchBatch was not called.
    spdlog::error("cuda device {}: {} held-back launches dropped at shutdown", options_.ordinal,
                  launch_batch_->size());
  }
  launch_batch_.reset();
  workspace_.reset();
  completion_.reset();  // Runs every pending callback.
  for (auto& [token, event] : profiles_) Cu().EventDestroy(event);
  for (auto& [id, event] : marks_) Cu().EventDestroy(event);
  for (auto& [slice, imported] : imports_) Cu().IpcCloseMemHandle(imported.base);
  compiler_.reset();
  modules_.reset();
  memory_.reset();   // Returns every page to the storage...
  storage_.reset();  // ...which frees it.
  staging_.reset();
  if (inline_read_buffer_ != nullptr) Cu().MemFreeHost(inline_read_buffer_);
  if (metadata_ring_ != 0) Cu().MemFree(metadata_ring_);
  if (stream_ != nullptr) Cu().StreamDestroy(stream_);
  context_.reset();
}

void CudaServer::SetDeviceLostCallback(DeviceLostCallback callback) {
  absl::MutexLock lock(&lost_mu_);
  on_lost_ = std::move(callback);
}

absl::Status CudaServer::LostStatus() const {
  if (!lost()) return absl::OkStatus();
  absl::MutexLock lock(&lost_mu_);
  return lost_status_;
}

absl::Status CudaServer::Check(absl::Status status) {
  if (status.ok() || !absl::IsUnavailable(status) ||
      !absl::StartsWith(status.message(), "device lost: ")) {
    return status;
  }
  DeviceLostCallback callback;
  {
    absl::MutexLock lock(&lost_mu_);
    if (lost_.load(std::memory_order_relaxed)) return status;
    lost_status_ = status;
    lost_.store(true, std::memory_order_release);
    callback = std::move(on_lost_);
  }
  spdlog::critical("cuda device {} lost: {}", options_.ordinal, std::string(status.message()));
  if (callback) callback(status);
  return status;
}

absl::StatusOr<CUdeviceptr> CudaServer::DevicePointer(const ResolvedBinding& binding) const {
  if (IsImportedSlice(binding.slice)) return ImportedPointer(binding);
  ASSIGN_OR_RETURN(SliceLocation where, memory_->Locate(binding.slice));
  ASSIGN_OR_RETURN(StorageResource resource, storage_->Resource(where.storage));
  // Device checked the view against the slice; this guards the invariant against bugs.
  if (binding.offset + binding.size > where.size) {
    return absl::InternalError(absl::StrCat("binding [", binding.offset, ", +", binding.size,
                                            ") exceeds its slice of ", where.size, " bytes"));
  }
  return resource.device_ptr + where.offset + binding.offset;
}

absl::StatusOr<CudaServer::Reserved> CudaServer::Reserve(uint64_t size, MemoryOwner owner) {
  LaunchHeldBackOrLog();
  RETURN_IF_ERROR(LostStatus());
  ASSIGN_OR_RETURN(Reservation reservation, memory_->Reserve(size, owner));
  Reserved r{reservation.slice, 0, 0, reservation.dirty};
  absl::StatusOr<SliceLocation> where = memory_->Locate(r.slice);
  absl::StatusOr<StorageResource> page =
      where.ok() ? storage_->Resource(where->storage) : where.status();
  if (!page.ok()) {
    memory_->FreeUninitialized(r.slice);
    return page.status();
  }
  r.ptr = page->device_ptr + where->offset;
  r.extent = where->extent;
  return r;
}

absl::Status CudaServer::ZeroAsync(CUdeviceptr ptr, uint64_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  RETURN_IF_ERROR(context_->MakeCurrent());
  // 32-bit words where aligned (slices are 256-byte aligned; a Create's tail may not be).
  const uint64_t head = std::min<uint64_t>(bytes, (4 - ptr % 4) % 4);
  const uint64_t words = (bytes - head) / 4;
  const uint64_t tail = bytes - head - words * 4;
  if (head > 0) CU_RETURN_IF_ERROR(Cu().MemsetD8Async(ptr, 0, head, stream_));
  if (words > 0) CU_RETURN_IF_ERROR(Cu().MemsetD32Async(ptr + head, 0, words, stream_));
  if (tail > 0) CU_RETURN_IF_ERROR(Cu().MemsetD8Async(ptr + bytes - tail, 0, tail, stream_));
  return absl::OkStatus();
}

absl::Status CudaServer::ZeroOutsideRows(const Reserved& r, uint64_t width, uint64_t pitch,
                                         uint64_t rows) {
  if (!r.dirty) return absl::OkStatus();
  const uint64_t covered = rows == 0 ? 0 : (rows - 1) * pitch + width;
  if (pitch > width && rows > 1) {  // Note [Pitched tensors]: the padding of each row.
    if (pitch > max_pitch_) return ZeroAsync(r.ptr, r.extent);  // Beyond cuMemsetD2D8's reach.
    RETURN_IF_ERROR(context_->MakeCurrent());
    CU_RETURN_IF_ERROR(
        Cu().MemsetD2D8Async(r.ptr + width, pitch, 0, pitch - width, rows - 1, stream_));
  }
  return ZeroAsync(r.ptr + covered, r.extent - covered);
}

absl::StatusOr<Allocation> CudaServer::Empty(uint64_t size, MemoryOwner owner) {
  ASSIGN_OR_RETURN(Reserved r, Reserve(size, owner));
  if (absl::Status s = r.dirty ? ZeroAsync(r.ptr, r.extent) : absl::OkStatus(); !s.ok()) {
    memory_->FreeUninitialized(r.slice);
    return Check(s);
  }
  return Allocation{r.slice, size, {}};
}

absl::StatusOr<Allocation> CudaServer::EmptyTensor(absl::Span<const uint64_t> shape,
                                                   uint32_t elem_size, MemoryOwner owner) {
  RETURN_IF_ERROR(LostStatus());
  std::optional<TensorAllocation> layout =
      PitchedTensorLayout(shape, elem_size, CudaStorage::kAlignment);
  if (!layout) return absl::InvalidArgumentError("tensor size overflows 64 bits");
  ASSIGN_OR_RETURN(Allocation a, Empty(layout->bytes, owner));
  a.strides = std::move(layout->strides);
  return a;
}

absl::Status CudaServer::Copy2D(CUdeviceptr device, uint64_t pitch, uint8_t* host, uint64_t width,
                                uint64_t height, bool to_device) {
  if (height == 1) {
    if (to_device) {
      CU_RETURN_IF_ERROR(Cu().MemcpyHtoDAsync(device, host, width, stream_));
    } else {
      CU_RETURN_IF_ERROR(Cu().MemcpyDtoHAsync(host, device, width, stream_));
    }
    return absl::OkStatus();
  }
  CUDA_MEMCPY2D p = {};
  if (to_device) {
    p.srcMemoryType = CU_MEMORYTYPE_HOST;
    p.srcHost = host;
    p.srcPitch = width;
    p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    p.dstDevice = device;
    p.dstPitch = pitch;
  } else {
    p.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    p.srcDevice = device;
    p.srcPitch = pitch;
    p.dstMemoryType = CU_MEMORYTYPE_HOST;
    p.dstHost = host;
    p.dstPitch = width;
  }
  p.WidthInBytes = width;
  p.Height = height;
  CU_RETURN_IF_ERROR(Cu().Memcpy2DAsync(&p, stream_));
  return absl::OkStatus();
}

// Note [Registered host memory]: a local client's shared-memory region (Note [Shared-memory
// regions], server/channel/shared_region.h) is page-locked with cuMemHostRegister when it is
// registered, so copies between it and the device go straight over PCIe by DMA, without the
// pinned staging buffers and the host memcpy each way. Such copies are asynchronous on the
// stream, like every other: a create's bytes are read from the region when the copy runs (the
// client must not change them until a later sync: docs/api.md), and a read's bytes are in the
// region once its completion ran. The region stays mapped and registered until
// UnregisterHostMemory, which first waits for the stream, so no queued copy outlives it.
bool CudaServer::IsRegistered(const uint8_t* data, uint64_t size) const {
  auto it = registered_.upper_bound(data);
  if (it == registered_.begin()) return false;
  --it;
  const uint64_t offset = static_cast<uint64_t>(data - it->first);
  return offset <= it->second && size <= it->second - offset;
}

absl::Status CudaServer::RegisterHostMemory(absl::Span<uint8_t> memory) {
  LaunchHeldBackOrLog();
  RETURN_IF_ERROR(LostStatus());
  RETURN_IF_ERROR(context_->MakeCurrent());
  const CUresult r = Cu().MemHostRegister(memory.data(), memory.size(), 0);
  if (r != CUDA_SUCCESS) {
    spdlog::warn(
        "cuMemHostRegister of {} bytes failed ({}); the region's copies go through "
        "staging",
        memory.size(), static_cast<int>(r));
    return absl::OkStatus();
  }
  registered_.emplace(memory.data(), memory.size());
  return absl::OkStatus();
}

void CudaServer::UnregisterHostMemory(absl::Span<uint8_t> memory) {
  LaunchHeldBackOrLog();
  auto it = registered_.find(memory.data());
  if (it == registered_.end()) return;
  registered_.erase(it);
  if (!context_->MakeCurrent().ok()) return;
  (void)Check(CU_STATUS(Cu().StreamSynchronize(stream_)));
  (void)Cu().MemHostUnregister(memory.data());
}

absl::Status CudaServer::Upload(CUdeviceptr base, absl::Span<const uint8_t> data,
                                absl::Span<const CopyPiece> pieces) {
  RETURN_IF_ERROR(context_->MakeCurrent());
  if (IsRegistered(data.data(), data.size())) {  // Note [Registered host memory].
    for (const CopyPiece& piece : pieces) {
      RETURN_IF_ERROR(Copy2D(base + piece.strided_offset, piece.pitch,
                             const_cast<uint8_t*>(data.data() + piece.dense_offset), piece.width,
                             piece.height, /*to_device=*/true));
    }
    return absl::OkStatus();
  }
  PinnedStagingPool* pool = staging_.get();
  for (const CopyPiece& piece : pieces) {
    ASSIGN_OR_RETURN(PinnedStagingPool::Buffer buffer, pool->Acquire(piece.bytes()));
    std::memcpy(buffer.data, data.data() + piece.dense_offset, piece.bytes());
    absl::Status status = Copy2D(base + piece.strided_offset, piece.pitch, buffer.data, piece.width,
                                 piece.height, /*to_device=*/true);
    if (!status.ok()) {
      pool->Release(buffer);
      return status;
    }
    completion_->After(stream_, [pool, buffer](absl::Status) { pool->Release(buffer); });
  }
  return absl::OkStatus();
}

absl::Status CudaServer::Upload(CUdeviceptr base, absl::Span<const absl::Span<const uint8_t>> data,
                                absl::Span<const CopyPiece> pieces) {
  if (data.size() == 1) return Upload(base, data[0], pieces);
  RETURN_IF_ERROR(context_->MakeCurrent());
  PinnedStagingPool* pool = staging_.get();
  for (const CopyPiece& piece : pieces) {
    ASSIGN_OR_RETURN(PinnedStagingPool::Buffer buffer, pool->Acquire(piece.bytes()));
    GatherCopy(data, piece.dense_offset, piece.bytes(), buffer.data);
    absl::Status status = Copy2D(base + piece.strided_offset, piece.pitch, buffer.data, piece.width,
                                 piece.height, /*to_device=*/true);
    if (!status.ok()) {
      pool->Release(buffer);
      return status;
    }
    completion_->After(stream_, [pool, buffer](absl::Status) { pool->Release(buffer); });
  }
  return absl::OkStatus();
}

absl::StatusOr<Allocation> CudaServer::Create(absl::Span<const uint8_t> data, MemoryOwner owner) {
  ASSIGN_OR_RETURN(Reserved r, Reserve(data.size(), owner));
  absl::Status status = ZeroOutsideRows(r, data.size(), data.size(), 1);
  if (status.ok()) {
    status = Upload(r.ptr, data, PlanContiguousCopy(data.size(), PinnedStagingPool::kChunkBytes));
  }
  if (!status.ok()) {
    memory_->FreeUninitialized(r.slice);
    return Check(status);
  }
  return Allocation{r.slice, data.size(), {}};
}

absl::StatusOr<Allocation> CudaServer::CreateTensor(absl::Span<const uint8_t> data,
                                                    absl::Span<const uint64_t> shape,
                                                    uint32_t elem_size, MemoryOwner owner) {
  RETURN_IF_ERROR(LostStatus());
  std::optional<TensorAllocation> layout =
      PitchedTensorLayout(shape, elem_size, CudaStorage::kAlignment);
  if (!layout) return absl::InvalidArgumentError("tensor size overflows 64 bits");
  ASSIGN_OR_RETURN(const uint64_t dense, TensorBytes(shape, elem_size, "shape"));
  if (dense != data.size()) return absl::InternalError("tensor data length differs from its shape");
  CopyPlanLimits limits;
  limits.max_pitch = max_pitch_;
  limits.max_pieces = UINT64_MAX;
  std::optional<std::vector<CopyPiece>> plan =
      PlanTensorCopy(shape, layout->strides, elem_size, limits);
  if (!plan) return absl::InternalError("no copy plan for a pitched tensor layout");
  ASSIGN_OR_RETURN(Reserved r, Reserve(layout->bytes, owner));
  // Note [Pitched tensors]: rows of shape[rank-1] elements every strides[rank-2] elements; a
  // contiguous tensor is one row of all its bytes.
  const size_t rank = shape.size();
  const bool pitched = rank >= 2 && layout->strides[rank - 2] != shape[rank - 1];
  const uint64_t width = pitched ? shape[rank - 1] * elem_size : data.size();
  const uint64_t pitch = pitched ? layout->strides[rank - 2] * elem_size : data.size();
  const uint64_t rows = pitched ? data.size() / width : 1;
  absl::Status status = ZeroOutsideRows(r, width, pitch, rows);
  if (status.ok()) status = Upload(r.ptr, data, *plan);
  if (!status.ok()) {
    memory_->FreeUninitialized(r.slice);
    return Check(status);
  }
  return Allocation{r.slice, layout->bytes, std::move(layout->strides)};
}

void CudaServer::Free(SliceId slice) {
  LaunchHeldBackOrLog();
  if (IsImportedSlice(slice)) {
    FreeImport(slice);
    return;
  }
  memory_->Free(slice);
}

void CudaServer::Write(const ResolvedTensor& target, uint64_t dense_offset,
                       absl::Span<const absl::Span<const uint8_t>> pieces, DoneCallback done) {
  LaunchHeldBackOrLog();
  absl::Status status = LostStatus();
  absl::StatusOr<CUdeviceptr> ptr = DevicePointer(target.binding);
  if (status.ok()) status = ptr.status();
  uint64_t size = 0;
  for (absl::Span<const uint8_t> piece : pieces) {
    const std::optional<uint64_t> sum = CheckedAdd(size, piece.size());
    if (!sum && status.ok()) status = absl::InternalError("cuda Write: the pieces' sizes overflow");
    size = sum.value_or(size);
  }
  if (status.ok()) {
    std::optional<std::vector<CopyPiece>> plan =
        PlanDenseRangeWrite(target.shape, target.strides, target.elem_size, dense_offset, size);
    status =
        plan ? Upload(*ptr, pieces, *plan)
             : absl::InternalError("cuda Write: the target layout is neither dense nor pitched");
  }
  done(Check(std::move(status)));
}

MemoryUsage CudaServer::Usage() const {
  MemoryUsage usage = memory_->Usage();
  if (workspace_ != nullptr) usage.bytes_reserved += workspace_->bytes();
  return usage;
}

void CudaServer::Cleanup() {
  LaunchHeldBackOrLog();
  memory_->Cleanup();
  if (workspace_ != nullptr && workspace_->bytes() > 0 && context_->MakeCurrent().ok()) {
    workspace_->Release();
  }
}

LaunchBatchStats CudaServer::LaunchBatches() const {
  return launch_batch_ == nullptr ? LaunchBatchStats() : launch_batch_->stats();
}

KernelCacheStats CudaServer::KernelCache() const {
  KernelCacheStats stats;
  if (compiler_ == nullptr) return stats;
  stats.hits = compiler_->hits() + builtin_function_hits_;
  stats.misses = compiler_->misses();
  stats.disk_hits = compiler_->disk_hits();
  stats.compile_time_us = compiler_->compile_microseconds();
  return stats;
}

absl::StatusOr<ResourceDescription> CudaServer::GetResource(const ResolvedBinding& binding) {
  RETURN_IF_ERROR(LostStatus());
  if (IsImportedSlice(binding.slice)) {  // Another process's memory: no page, no IPC handle.
    ASSIGN_OR_RETURN(CUdeviceptr ptr, ImportedPointer(binding));
    ResourceDescription r;
    r.offset = binding.offset;
    r.size = binding.size;
    r.device_pointer = ptr;
    return r;
  }
  ASSIGN_OR_RETURN(SliceLocation where, memory_->Locate(binding.slice));
  ASSIGN_OR_RETURN(CUdeviceptr ptr, DevicePointer(binding));
  ResourceDescription r;
  r.storage_id = where.storage;
  r.offset = where.offset + binding.offset;
  r.size = binding.size;
  r.device_pointer = ptr;
  absl::StatusOr<std::string> ipc = storage_->IpcHandle(where.storage);
  if (ipc.ok()) {
    r.ipc_handle = *std::move(ipc);
  } else if (!absl::IsUnimplemented(ipc.status())) {
    return Check(ipc.status());
  }
  return r;
}

absl::Status CudaServer::Flush() {
  RETURN_IF_ERROR(LaunchHeldBack());
  return LostStatus();
}

void CudaServer::BeginLaunchBatch() { launch_batch_open_ = launch_batch_ != nullptr; }

void CudaServer::EndLaunchBatch() {
  launch_batch_open_ = false;
  LaunchHeldBackOrLog();
}

// Note [Launch batches]: the batch never stays queued past this call, whatever happens: a
// launch that cannot be sent makes the device lost (its command was answered OK already).
absl::Status CudaServer::SendLaunchBatch() {
  if (absl::Status lost = LostStatus(); !lost.ok()) {
    launch_batch_->Drop();
    return lost;
  }
  absl::Status status = context_->MakeCurrent();
  if (status.ok()) status = launch_batch_->Launch();
  if (status.ok()) return status;
  launch_batch_->Drop();
  return Check(absl::UnavailableError(
      absl::StrCat("device lost: launches held back and already answered could not be sent (",
                   status.message(), ")")));
}

void CudaServer::LaunchHeldBackOrLog() {
  const size_t held = launch_batch_ == nullptr ? 0 : launch_batch_->size();
  if (absl::Status status = LaunchHeldBack(); !status.ok()) {
    spdlog::error("cuda device {}: sending {} held-back launches: {}", options_.ordinal, held,
                  status.ToString());
  }
}

void CudaServer::Sync(DoneCallback done) {
  LaunchHeldBackOrLog();
  if (absl::Status lost = LostStatus(); !lost.ok()) {
    done(lost);
    return;
  }
  if (absl::Status s = context_->MakeCurrent(); !s.ok()) {
    done(s);
    return;
  }
  completion_->After(stream_, std::move(done));
}

absl::StatusOr<ProfileToken> CudaServer::StartProfile() {
  LaunchHeldBackOrLog();
  RETURN_IF_ERROR(LostStatus());
  RETURN_IF_ERROR(context_->MakeCurrent());
  CUevent start = nullptr;
  CU_RETURN_IF_ERROR(Cu().EventCreate(&start, CU_EVENT_BLOCKING_SYNC));
  if (absl::Status s = CU_STATUS(Cu().EventRecord(start, stream_)); !s.ok()) {
    Cu().EventDestroy(start);
    return Check(s);
  }
  const ProfileToken token = next_profile_++;
  profiles_[token] = start;
  return token;
}

uint64_t CudaServer::DeviceMark() {
  LaunchHeldBackOrLog();  // A mark after a held-back launch must follow it on the stream.
  if (!LostStatus().ok() || !context_->MakeCurrent().ok()) return 0;
  CUevent event = nullptr;
  if (Cu().EventCreate(&event, CU_EVENT_DEFAULT) != CUDA_SUCCESS) return 0;
  if (Cu().EventRecord(event, stream_) != CUDA_SUCCESS) {
    Cu().EventDestroy(event);
    return 0;
  }
  const uint64_t id = next_mark_++;
  marks_[id] = event;
  return id;
}

void CudaServer::TimeMarks(std::vector<uint64_t> marks, MarksCallback done) {
  std::vector<CUevent> events;
  absl::Status status;
  for (uint64_t id : marks) {
    auto it = marks_.find(id);
    if (it == marks_.end()) {
      if (status.ok()) status = absl::InternalError(absl::StrCat("unknown device mark ", id));
      continue;
    }
    events.push_back(it->second);
    marks_.erase(it);
  }
  if (!status.ok() || events.empty()) {
    for (CUevent e : events) Cu().EventDestroy(e);
    done(status.ok() ? absl::InvalidArgumentError("no device marks to time") : status);
    return;
  }
  CUevent last = events.back();
  completion_->AfterEvent(
      last, [this, events = std::move(events), done = std::move(done)](absl::Status s) mutable {
        std::vector<int64_t> ns;
        ns.reserve(events.size());
        for (CUevent e : events) {
          float ms = 0;
          if (s.ok()) s = Check(CU_STATUS(Cu().EventElapsedTime(&ms, events.front(), e)));
          ns.push_back(static_cast<int64_t>(static_cast<double>(ms) * 1e6));
        }
        for (CUevent e : events) Cu().EventDestroy(e);
        if (!s.ok()) {
          done(s);
        } else {
          done(std::move(ns));
        }
      });
}

void CudaServer::EndProfile(ProfileToken token, DurationCallback done) {
  LaunchHeldBackOrLog();
  auto it = profiles_.find(token);
  if (it == profiles_.end()) {
    done(absl::InternalError(absl::StrCat("unknown profile token ", token)));
    return;
  }
  CUevent start = it->second;
  profiles_.erase(it);
  CUevent end = nullptr;
  absl::Status status = LostStatus();
  if (status.ok()) status = context_->MakeCurrent();
  if (status.ok()) status = CU_STATUS(Cu().EventCreate(&end, CU_EVENT_BLOCKING_SYNC));
  if (status.ok()) status = Check(CU_STATUS(Cu().EventRecord(end, stream_)));
  if (!status.ok()) {
    Cu().EventDestroy(start);
    if (end != nullptr) Cu().EventDestroy(end);
    done(status);
    return;
  }
  completion_->AfterEvent(end, [this, start, end, done = std::move(done)](absl::Status s) mutable {
    float ms = 0;
    if (s.ok()) s = Check(CU_STATUS(Cu().EventElapsedTime(&ms, start, end)));
    Cu().EventDestroy(start);
    Cu().EventDestroy(end);
    if (!s.ok()) {
      done(s);
    } else {
      done(absl::Microseconds(static_cast<double>(ms) * 1000.0));
    }
  });
}

}  // namespace cubed
