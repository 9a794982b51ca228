#pragma once

// The CUDA driver API, loaded at run time with dlopen: cubed links neither libcuda nor cudart, so
// one binary runs on machines with and without a GPU. Types come from the toolkit's <cuda.h>;
// functions from the table that LoadCudaDriver fills (the _v2 symbols where cuda.h maps to them).
// Every call goes through CU_RETURN_IF_ERROR / CuStatus (CONVENTIONS.md §11).

#include <cuda.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cubed {

// One pointer per driver function cubed uses, resolved by name. Optional entries (newer drivers
// only) may be null; every other entry is non-null once loaded.
struct CudaDriver {
  decltype(&::cuInit) Init = nullptr;
  decltype(&::cuDriverGetVersion) DriverGetVersion = nullptr;
  decltype(&::cuGetErrorName) GetErrorName = nullptr;
  decltype(&::cuGetErrorString) GetErrorString = nullptr;
  decltype(&::cuDeviceGetCount) DeviceGetCount = nullptr;
  decltype(&::cuDeviceGet) DeviceGet = nullptr;
  decltype(&::cuDeviceGetName) DeviceGetName = nullptr;
  decltype(&::cuDeviceGetUuid_v2) DeviceGetUuid = nullptr;
  decltype(&::cuDeviceGetAttribute) DeviceGetAttribute = nullptr;
  decltype(&::cuDeviceTotalMem_v2) DeviceTotalMem = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) DevicePrimaryCtxRetain = nullptr;
  decltype(&::cuDevicePrimaryCtxRelease_v2) DevicePrimaryCtxRelease = nullptr;
  decltype(&::cuCtxSetCurrent) CtxSetCurrent = nullptr;
  decltype(&::cuCtxSynchronize) CtxSynchronize = nullptr;
  decltype(&::cuStreamCreate) StreamCreate = nullptr;
  decltype(&::cuStreamDestroy_v2) StreamDestroy = nullptr;
  decltype(&::cuStreamSynchronize) StreamSynchronize = nullptr;
  decltype(&::cuStreamQuery) StreamQuery = nullptr;  // Optional: small reads inline when idle.
  decltype(&::cuEventCreate) EventCreate = nullptr;
  decltype(&::cuEventDestroy_v2) EventDestroy = nullptr;
  decltype(&::cuEventRecord) EventRecord = nullptr;
  decltype(&::cuEventSynchronize) EventSynchronize = nullptr;
  decltype(&::cuEventQuery) EventQuery = nullptr;  // Optional: polled before a blocking wait.
  decltype(&::cuEventElapsedTime_v2) EventElapsedTime = nullptr;  // _v2, else the original.
  decltype(&::cuMemAlloc_v2) MemAlloc = nullptr;
  decltype(&::cuMemFree_v2) MemFree = nullptr;
  decltype(&::cuMemGetInfo_v2) MemGetInfo = nullptr;
  decltype(&::cuMemHostAlloc) MemHostAlloc = nullptr;
  decltype(&::cuMemFreeHost) MemFreeHost = nullptr;
  decltype(&::cuMemHostRegister_v2) MemHostRegister = nullptr;
  decltype(&::cuMemHostUnregister) MemHostUnregister = nullptr;
  decltype(&::cuMemcpyHtoDAsync_v2) MemcpyHtoDAsync = nullptr;
  decltype(&::cuMemcpyDtoHAsync_v2) MemcpyDtoHAsync = nullptr;
  decltype(&::cuMemcpyDtoH_v2) MemcpyDtoH = nullptr;
  decltype(&::cuMemcpyHtoD_v2) MemcpyHtoD = nullptr;  // Tests and tools (synchronous copies).
  decltype(&::cuMemcpyDtoD_v2) MemcpyDtoD = nullptr;
  decltype(&::cuMemcpyDtoDAsync_v2) MemcpyDtoDAsync = nullptr;
  decltype(&::cuMemcpy2DAsync_v2) Memcpy2DAsync = nullptr;
  decltype(&::cuMemsetD8Async) MemsetD8Async = nullptr;
  decltype(&::cuMemsetD32Async) MemsetD32Async = nullptr;
  decltype(&::cuMemsetD2D8Async) MemsetD2D8Async = nullptr;
  decltype(&::cuModuleLoadData) ModuleLoadData = nullptr;
  decltype(&::cuModuleUnload) ModuleUnload = nullptr;
  decltype(&::cuModuleGetFunction) ModuleGetFunction = nullptr;
  decltype(&::cuFuncGetAttribute) FuncGetAttribute = nullptr;
  decltype(&::cuFuncSetAttribute) FuncSetAttribute = nullptr;
  decltype(&::cuFuncGetParamInfo) FuncGetParamInfo = nullptr;  // Optional (driver 12.4+).
  decltype(&::cuLaunchKernel) LaunchKernel = nullptr;
  decltype(&::cuIpcGetMemHandle) IpcGetMemHandle = nullptr;
  decltype(&::cuIpcOpenMemHandle_v2) IpcOpenMemHandle = nullptr;
  decltype(&::cuIpcCloseMemHandle) IpcCloseMemHandle = nullptr;
  // Imported memory (Note [Imported memory], server/compute/compute_server.h): the extent of an
  // opened IPC mapping and the device it lives on.
  decltype(&::cuMemGetAddressRange_v2) MemGetAddressRange = nullptr;
  decltype(&::cuPointerGetAttribute) PointerGetAttribute = nullptr;
  // CUDA graphs (Note [CUDA graph replays], server/compute/cuda/cuda_graph.cc). Optional: null
  // when the driver lacks one, and recorded graphs then replay launch by launch.
  decltype(&::cuStreamBeginCapture_v2) StreamBeginCapture = nullptr;
  decltype(&::cuStreamEndCapture) StreamEndCapture = nullptr;
  decltype(&::cuGraphInstantiateWithFlags) GraphInstantiate = nullptr;
  decltype(&::cuGraphExecUpdate_v2) GraphExecUpdate = nullptr;
  decltype(&::cuGraphLaunch) GraphLaunch = nullptr;
  decltype(&::cuGraphExecDestroy) GraphExecDestroy = nullptr;
  decltype(&::cuGraphDestroy) GraphDestroy = nullptr;
  // Launch batches (Note [Launch batches], server/compute/cuda/cuda_launch_batch.h). Optional,
  // all or none (GraphCreate null when one is missing): without them every launch is a stream
  // launch.
  decltype(&::cuGraphCreate) GraphCreate = nullptr;
  decltype(&::cuGraphAddKernelNode_v2) GraphAddKernelNode = nullptr;
  decltype(&::cuGraphExecKernelNodeSetParams_v2) GraphExecKernelNodeSetParams = nullptr;

  int version = 0;  // cuDriverGetVersion, e.g. 13000.
};

// Loads `library` (default "libcuda.so.1") once per process, resolves the table and calls
// cuInit(0). Later calls return the same table (or the same error) whatever `library` says.
// FAILED_PRECONDITION saying why: library missing, a symbol missing (driver too old), the
// toolkit's stub library instead of a driver, or cuInit failing (e.g. no device, no permission).
// Thread-safe.
absl::StatusOr<const CudaDriver*> LoadCudaDriver(const std::string& library = "libcuda.so.1");

// Loads `library`, resolves a fresh table and calls cuInit(0), without touching the process-wide
// table (errors as LoadCudaDriver). For tests and tools that probe a library; the daemon uses
// LoadCudaDriver. On success the library stays loaded.
absl::StatusOr<CudaDriver> OpenCudaDriver(const std::string& library);

// The loaded table. Only after LoadCudaDriver succeeded.
const CudaDriver& Cu();

// The CUdevice of `ordinal` after checking the count: FAILED_PRECONDITION when the machine has
// no CUDA device or `ordinal` is past the last one (naming how many there are).
absl::StatusOr<CUdevice> CudaDeviceForOrdinal(int ordinal);

// True for errors that leave the context unusable (illegal address, launch failure, ...): the
// device is lost and the process must restart to use it again.
bool IsStickyCudaError(CUresult result);

// The Status of a driver result: OK for CUDA_SUCCESS; otherwise a message with the call text, the
// error's name and description and file:line. Codes: RESOURCE_EXHAUSTED for out-of-memory,
// UNAVAILABLE with "device lost: " first for sticky errors, INTERNAL for the rest (callers
// remap errors that client input can cause).
absl::Status CuStatus(CUresult result, const char* call, const char* file, int line);

// The error's name, e.g. "CUDA_ERROR_ILLEGAL_ADDRESS" ("CUresult N" if the driver has none).
std::string CuErrorName(CUresult result);

// A device UUID (cuDeviceGetUuid) as nvidia-smi prints it:
// "GPU-" then 32 lowercase hex digits in groups of 8-4-4-4-12.
std::string FormatGpuUuid(const CUuuid& uuid);

}  // namespace cubed

// Returns the status of a driver call from the enclosing function when it is not CUDA_SUCCESS.
#define CU_RETURN_IF_ERROR(call)                                             \
  do {                                                                       \
    const CUresult cubed_cu_result_ = (call);                                \
    if (cubed_cu_result_ != CUDA_SUCCESS) {                                  \
      return ::cubed::CuStatus(cubed_cu_result_, #call, __FILE__, __LINE__); \
    }                                                                        \
  } while (false)

// The Status of one driver call, for places that must not return at once.
#define CU_STATUS(call) ::cubed::CuStatus((call), #call, __FILE__, __LINE__)
