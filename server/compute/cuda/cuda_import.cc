// Imported memory on the CUDA backend (Note [Imported memory], server/compute/compute_server.h):
// another local process's allocation opened through its CUDA IPC handle. Part of CudaServer.

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/compute/cuda/cuda_server.h"
#include "spdlog/spdlog.h"

namespace cubed {

absl::StatusOr<Allocation> CudaServer::Import(const ImportSource& source) {
  LaunchHeldBackOrLog();
  RETURN_IF_ERROR(LostStatus());
  if (source.kind != ImportSource::Kind::kCudaIpc) {
    return absl::UnimplementedError(
        "the cuda backend imports device memory through CUDA IPC (cuda_ipc) only, not a "
        "shared-memory region's range (host memory: create from the region instead)");
  }
  if (source.ipc_handle.size() != CU_IPC_HANDLE_SIZE) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda_ipc.ipc_handle: ", source.ipc_handle.size(),
        " bytes; a CUDA IPC memory handle (cuIpcGetMemHandle) has ", CU_IPC_HANDLE_SIZE));
  }
  if (source.size == 0) {
    return absl::InvalidArgumentError("cuda_ipc.size: 0; an import needs at least 1 byte");
  }
  if (source.device_uuid != description_.uuid) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda_ipc.device_uuid: the memory is on GPU \"", source.device_uuid,
                     "\", this device (", description_.index, ") is ", description_.uuid,
                     ": import it into a session on the producer's GPU"));
  }
  RETURN_IF_ERROR(context_->MakeCurrent());
  CUipcMemHandle handle;
  std::memcpy(handle.reserved, source.ipc_handle.data(), CU_IPC_HANDLE_SIZE);
  CUdeviceptr base = 0;
  // The driver counts opens of one allocation in a context and returns the same address.
  if (CUresult r = Cu().IpcOpenMemHandle(&base, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
      r != CUDA_SUCCESS) {
    if (IsStickyCudaError(r)) return Check(CU_STATUS(r));
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda_ipc.ipc_handle: the driver cannot open it (cuIpcOpenMemHandle: ", CuErrorName(r),
        "): not the IPC handle of a live allocation of another process on this host"));
  }
  // From here on, every refusal closes the mapping again.
  auto refuse = [&](absl::Status status) {
    Cu().IpcCloseMemHandle(base);
    return status;
  };
  CUdeviceptr range_base = 0;
  size_t range_size = 0;
  if (absl::Status s = CU_STATUS(Cu().MemGetAddressRange(&range_base, &range_size, base));
      !s.ok()) {
    return refuse(Check(s));
  }
  int ordinal = -1;
  if (absl::Status s =
          CU_STATUS(Cu().PointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, base));
      !s.ok()) {
    return refuse(Check(s));
  }
  if (ordinal != options_.ordinal) {
    return refuse(absl::InvalidArgumentError(
        absl::StrCat("cuda_ipc: the allocation lives on CUDA device ", ordinal,
                     " of the daemon, not on its "
                     "device ",
                     options_.ordinal, " (", description_.uuid,
                     "); cubed does not import "
                     "memory across GPUs")));
  }
  const uint64_t extent = static_cast<uint64_t>(range_base + range_size - base);
  if (source.offset > extent || source.size > extent - source.offset) {
    return refuse(absl::InvalidArgumentError(
        absl::StrCat("cuda_ipc: offset ", source.offset, " + size ", source.size,
                     " exceeds the imported allocation of ", extent, " bytes")));
  }
  const SliceId slice = kImportedSlice | next_import_++;
  imports_[slice] = Imported{base, base + source.offset, source.size};
  spdlog::debug("cuda device {}: imported {} bytes at offset {} of a {}-byte IPC allocation",
                options_.ordinal, source.size, source.offset, extent);
  return Allocation{slice, source.size, {}};
}

ImportedMemory CudaServer::Imports() const {
  ImportedMemory m;
  for (const auto& [slice, imported] : imports_) {
    ++m.buffers;
    m.bytes += imported.size;
  }
  return m;
}

void CudaServer::FreeImport(SliceId slice) {
  auto it = imports_.find(slice);
  if (it == imports_.end()) {
    spdlog::error("cuda device {}: free of unknown imported slice {}", options_.ordinal, slice);
    return;
  }
  const CUdeviceptr base = it->second.base;
  imports_.erase(it);
  // Work queued before that uses the memory completes before its mapping goes.
  absl::Status s = context_->MakeCurrent();
  if (s.ok()) s = CU_STATUS(Cu().StreamSynchronize(stream_));
  if (s.ok()) s = CU_STATUS(Cu().IpcCloseMemHandle(base));
  if (!s.ok()) {
    spdlog::warn("cuda device {}: closing an imported IPC mapping: {}", options_.ordinal,
                 std::string(s.message()));
    Check(std::move(s)).IgnoreError();  // Marks the device lost when sticky.
  }
}

absl::StatusOr<CUdeviceptr> CudaServer::ImportedPointer(const ResolvedBinding& binding) const {
  auto it = imports_.find(binding.slice);
  if (it == imports_.end()) {
    return absl::NotFoundError(absl::StrCat("no imported slice ", binding.slice));
  }
  // Device checked the view against the handle; this guards the invariant against bugs.
  if (binding.offset + binding.size > it->second.size) {
    return absl::InternalError(absl::StrCat("binding [", binding.offset, ", +", binding.size,
                                            ") exceeds its imported range of ", it->second.size,
                                            " bytes"));
  }
  return it->second.ptr + binding.offset;
}

}  // namespace cubed
