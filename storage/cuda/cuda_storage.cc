#include "storage/cuda/cuda_storage.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/cuda/cuda_driver.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace cubed {

CudaStorage::CudaStorage(CudaStorageOptions options) : options_(std::move(options)) {}

CudaStorage::~CudaStorage() {
  if (allocations_.empty()) return;
  if (!options_.context->MakeCurrent().ok()) return;
  if (options_.stream != nullptr) {
    Cu().StreamSynchronize(options_.stream);
  } else {
    Cu().CtxSynchronize();
  }
  for (auto& [id, allocation] : allocations_) Cu().MemFree(allocation.ptr);
}

absl::StatusOr<StorageId> CudaStorage::Alloc(uint64_t size) {
  if (size == 0) return absl::InvalidArgumentError("cuda storage: cannot allocate 0 bytes");
  RETURN_IF_ERROR(options_.context->MakeCurrent());
  CUdeviceptr ptr = 0;
  const CUresult result = Cu().MemAlloc(&ptr, size);
  if (result == CUDA_ERROR_OUT_OF_MEMORY) {
    size_t free = 0, total = 0;
    Cu().MemGetInfo(&free, &total);
    return absl::ResourceExhaustedError(
        absl::StrCat("cuda storage: out of device memory allocating ", size, " bytes (device ",
                     options_.context->ordinal(), ": ", free, " of ", total, " bytes free; ",
                     bytes_allocated_, " bytes held by cubed)"));
  }
  CU_RETURN_IF_ERROR(result);
  if (ptr % kAlignment != 0) {  // Never seen; guards the pools' alignment invariant.
    Cu().MemFree(ptr);
    return absl::InternalError(
        absl::StrCat("cuMemAlloc returned an address not aligned to ", kAlignment, " bytes"));
  }
  if (options_.stream != nullptr) {
    // Zeroed once per allocation, so that a pool's new page is kZeroedOwner (Note [Owner-tagged
    // memory]): a page of unknown content would make every slice freed into it unknown too, and
    // a session's reuse of its own memory would be zeroed every time.
    const absl::Status zeroed =
        size % 4 == 0 ? CU_STATUS(Cu().MemsetD32Async(ptr, 0, size / 4, options_.stream))
                      : CU_STATUS(Cu().MemsetD8Async(ptr, 0, size, options_.stream));
    if (!zeroed.ok()) {
      Cu().MemFree(ptr);
      return zeroed;
    }
  }
  const StorageId id = next_id_++;
  allocations_.emplace(id, Allocation{ptr, size, {}});
  bytes_allocated_ += size;
  return id;
}

StorageCapabilities CudaStorage::capabilities() const {
  StorageCapabilities capabilities;
  capabilities.zeroes_new_allocations = options_.stream != nullptr;
  return capabilities;
}

void CudaStorage::Dealloc(StorageId id) {
  auto it = allocations_.find(id);
  if (it == allocations_.end()) {
    spdlog::warn("cuda storage: Dealloc of unknown storage id {} ignored", id);
    return;
  }
  absl::Status status = options_.context->MakeCurrent();
  if (status.ok()) {
    status = options_.stream != nullptr ? CU_STATUS(Cu().StreamSynchronize(options_.stream))
                                        : CU_STATUS(Cu().CtxSynchronize());
  }
  // Freed even when the wait failed: after a sticky error the memory is gone with the context.
  const absl::Status freed = CU_STATUS(Cu().MemFree(it->second.ptr));
  if (status.ok()) status = freed;
  bytes_allocated_ -= it->second.size;
  allocations_.erase(it);
  if (!status.ok()) {
    spdlog::error("cuda storage: freeing storage id {}: {}", id, status.ToString());
    if (options_.on_error) options_.on_error(status);
  }
}

absl::StatusOr<StorageResource> CudaStorage::Resource(StorageId id) const {
  auto it = allocations_.find(id);
  if (it == allocations_.end()) {
    return absl::NotFoundError(absl::StrCat("cuda storage: unknown storage id ", id));
  }
  StorageResource resource;
  resource.device_ptr = it->second.ptr;
  resource.size = it->second.size;
  return resource;
}

absl::StatusOr<std::string> CudaStorage::IpcHandle(StorageId id) {
  auto it = allocations_.find(id);
  if (it == allocations_.end()) {
    return absl::NotFoundError(absl::StrCat("cuda storage: unknown storage id ", id));
  }
  if (it->second.ipc_handle.empty()) {
    RETURN_IF_ERROR(options_.context->MakeCurrent());
    CUipcMemHandle handle;
    const CUresult result = Cu().IpcGetMemHandle(&handle, it->second.ptr);
    if (result == CUDA_ERROR_NOT_SUPPORTED || result == CUDA_ERROR_INVALID_VALUE) {
      return absl::UnimplementedError(
          absl::StrCat("cuIpcGetMemHandle: CUDA IPC is not available on this device or system (",
                       CuErrorName(result), ")"));
    }
    CU_RETURN_IF_ERROR(result);
    it->second.ipc_handle.assign(handle.reserved, sizeof(handle.reserved));
  }
  return it->second.ipc_handle;
}

}  // namespace cubed
