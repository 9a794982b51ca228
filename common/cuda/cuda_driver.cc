#include "common/cuda/cuda_driver.h"

#include <dlfcn.h>

#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cubed {
namespace {

CudaDriver g_driver;
absl::Status g_load_status;
std::once_flag g_load_once;

// Resolves `name` into `*fn`; false when the library lacks it.
template <typename Fn>
bool Resolve(void* library, const char* name, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(library, name));
  return *fn != nullptr;
}

}  // namespace

absl::StatusOr<CudaDriver> OpenCudaDriver(const std::string& library_name) {
  void* library = dlopen(library_name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot load the CUDA driver library ", library_name, " (", why ? why : "unknown error",
        "): is the NVIDIA driver installed on this machine?"));
  }
  CudaDriver d;
  std::string missing;
  auto need = [&](const char* name, auto* fn) {
    if (!Resolve(library, name, fn)) absl::StrAppend(&missing, missing.empty() ? "" : ", ", name);
  };
  need("cuInit", &d.Init);
  need("cuDriverGetVersion", &d.DriverGetVersion);
  need("cuGetErrorName", &d.GetErrorName);
  need("cuGetErrorString", &d.GetErrorString);
  need("cuDeviceGetCount", &d.DeviceGetCount);
  need("cuDeviceGet", &d.DeviceGet);
  need("cuDeviceGetName", &d.DeviceGetName);
  need("cuDeviceGetUuid_v2", &d.DeviceGetUuid);
  need("cuDeviceGetAttribute", &d.DeviceGetAttribute);
  need("cuDeviceTotalMem_v2", &d.DeviceTotalMem);
  need("cuDevicePrimaryCtxRetain", &d.DevicePrimaryCtxRetain);
  need("cuDevicePrimaryCtxRelease_v2", &d.DevicePrimaryCtxRelease);
  need("cuCtxSetCurrent", &d.CtxSetCurrent);
  need("cuCtxSynchronize", &d.CtxSynchronize);
  need("cuStreamCreate", &d.StreamCreate);
  need("cuStreamDestroy_v2", &d.StreamDestroy);
  need("cuStreamSynchronize", &d.StreamSynchronize);
  need("cuEventCreate", &d.EventCreate);
  need("cuEventDestroy_v2", &d.EventDestroy);
  need("cuEventRecord", &d.EventRecord);
  need("cuEventSynchronize", &d.EventSynchronize);
  Resolve(library, "cuEventQuery", &d.EventQuery);    // Optional.
  Resolve(library, "cuStreamQuery", &d.StreamQuery);  // Optional.
  if (!Resolve(library, "cuEventElapsedTime_v2", &d.EventElapsedTime)) {
    need("cuEventElapsedTime", &d.EventElapsedTime);  // Same signature before 12.8.
  }
  need("cuMemAlloc_v2", &d.MemAlloc);
  need("cuMemFree_v2", &d.MemFree);
  need("cuMemGetInfo_v2", &d.MemGetInfo);
  need("cuMemHostAlloc", &d.MemHostAlloc);
  need("cuMemFreeHost", &d.MemFreeHost);
  need("cuMemHostRegister_v2", &d.MemHostRegister);
  need("cuMemHostUnregister", &d.MemHostUnregister);
  need("cuMemcpyHtoDAsync_v2", &d.MemcpyHtoDAsync);
  need("cuMemcpyDtoHAsync_v2", &d.MemcpyDtoHAsync);
  need("cuMemcpyDtoH_v2", &d.MemcpyDtoH);
  need("cuMemcpyHtoD_v2", &d.MemcpyHtoD);
  need("cuMemcpyDtoD_v2", &d.MemcpyDtoD);
  need("cuMemcpyDtoDAsync_v2", &d.MemcpyDtoDAsync);
  need("cuMemcpy2DAsync_v2", &d.Memcpy2DAsync);
  need("cuMemsetD8Async", &d.MemsetD8Async);
  need("cuMemsetD32Async", &d.MemsetD32Async);
  need("cuMemsetD2D8Async", &d.MemsetD2D8Async);
  need("cuModuleLoadData", &d.ModuleLoadData);
  need("cuModuleUnload", &d.ModuleUnload);
  need("cuModuleGetFunction", &d.ModuleGetFunction);
  need("cuFuncGetAttribute", &d.FuncGetAttribute);
  need("cuFuncSetAttribute", &d.FuncSetAttribute);
  Resolve(library, "cuFuncGetParamInfo", &d.FuncGetParamInfo);  // Optional.
  need("cuLaunchKernel", &d.LaunchKernel);
  need("cuIpcGetMemHandle", &d.IpcGetMemHandle);
  need("cuIpcOpenMemHandle_v2", &d.IpcOpenMemHandle);
  need("cuIpcCloseMemHandle", &d.IpcCloseMemHandle);
  need("cuMemGetAddressRange_v2", &d.MemGetAddressRange);
  need("cuPointerGetAttribute", &d.PointerGetAttribute);
  bool graphs = Resolve(library, "cuStreamBeginCapture_v2", &d.StreamBeginCapture);
  graphs = Resolve(library, "cuStreamEndCapture", &d.StreamEndCapture) && graphs;
  graphs = Resolve(library, "cuGraphInstantiateWithFlags", &d.GraphInstantiate) && graphs;
  graphs = Resolve(library, "cuGraphExecUpdate_v2", &d.GraphExecUpdate) && graphs;
  graphs = Resolve(library, "cuGraphLaunch", &d.GraphLaunch) && graphs;
  graphs = Resolve(library, "cuGraphExecDestroy", &d.GraphExecDestroy) && graphs;
  graphs = Resolve(library, "cuGraphDestroy", &d.GraphDestroy) && graphs;
  if (!graphs) d.StreamBeginCapture = nullptr;  // All or none: graphs() tests this one.
  bool batches = graphs && Resolve(library, "cuGraphCreate", &d.GraphCreate);
  batches = Resolve(library, "cuGraphAddKernelNode_v2", &d.GraphAddKernelNode) && batches;
  batches =
      Resolve(library, "cuGraphExecKernelNodeSetParams_v2", &d.GraphExecKernelNodeSetParams) &&
      batches;
  if (!batches) d.GraphCreate = nullptr;  // All or none, and only with the graph calls above.
  if (!missing.empty()) {
    dlclose(library);
    return absl::FailedPreconditionError(absl::StrCat(
        "the CUDA driver library ", library_name, " lacks ", missing,
        ": the NVIDIA driver is too old for cubed (it needs a CUDA 12 or newer driver)"));
  }
  const CUresult init = d.Init(0);
  if (init != CUDA_SUCCESS) {
    absl::Status status;
    if (init == CUDA_ERROR_STUB_LIBRARY) {
      status = absl::FailedPreconditionError(
          absl::StrCat(library_name,
                       " is the CUDA toolkit's stub library, not a driver: no NVIDIA driver is "
                       "installed (or the stub shadows it on the library path)"));
    } else if (init == CUDA_ERROR_NO_DEVICE) {
      status =
          absl::FailedPreconditionError("the CUDA driver found no CUDA device on this machine");
    } else {
      const char* name = nullptr;
      const char* text = nullptr;
      d.GetErrorName(init, &name);
      d.GetErrorString(init, &text);
      status = absl::FailedPreconditionError(absl::StrCat(
          "cuInit failed with ", name ? name : absl::StrCat("CUresult ", init), " (",
          text ? text : "no description", "): the NVIDIA driver or device is not usable"));
    }
    dlclose(library);
    return status;
  }
  d.DriverGetVersion(&d.version);
  return d;  // The library stays loaded for the life of the process.
}

absl::StatusOr<const CudaDriver*> LoadCudaDriver(const std::string& library) {
  std::call_once(g_load_once, [&] {
    absl::StatusOr<CudaDriver> driver = OpenCudaDriver(library);
    g_load_status = driver.status();
    if (driver.ok()) g_driver = *driver;
  });
  if (!g_load_status.ok()) return g_load_status;
  return &g_driver;
}

const CudaDriver& Cu() { return g_driver; }

absl::StatusOr<CUdevice> CudaDeviceForOrdinal(int ordinal) {
  int count = 0;
  CU_RETURN_IF_ERROR(Cu().DeviceGetCount(&count));
  if (count == 0) {
    return absl::FailedPreconditionError("the CUDA driver found no CUDA device on this machine");
  }
  if (ordinal < 0 || ordinal >= count) {
    return absl::FailedPreconditionError(absl::StrCat("--device=", ordinal, ": this machine has ",
                                                      count, " CUDA device", count == 1 ? "" : "s",
                                                      " (ordinals 0 .. ", count - 1, ")"));
  }
  CUdevice device = 0;
  CU_RETURN_IF_ERROR(Cu().DeviceGet(&device, ordinal));
  return device;
}

bool IsStickyCudaError(CUresult result) {
  switch (result) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_NVLINK_UNCORRECTABLE:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
      return true;
    default:
      return false;
  }
}

std::string CuErrorName(CUresult result) {
  const char* name = nullptr;
  if (Cu().GetErrorName != nullptr && Cu().GetErrorName(result, &name) == CUDA_SUCCESS &&
      name != nullptr) {
    return name;
  }
  return absl::StrCat("CUresult ", static_cast<int>(result));
}

absl::Status CuStatus(CUresult result, const char* call, const char* file, int line) {
  if (result == CUDA_SUCCESS) return absl::OkStatus();
  const char* text = nullptr;
  if (Cu().GetErrorString != nullptr) Cu().GetErrorString(result, &text);
  const std::string message = absl::StrCat(CuErrorName(result), " (", text ? text : "?", ") in ",
                                           call, " at ", file, ":", line);
  if (result == CUDA_ERROR_OUT_OF_MEMORY) return absl::ResourceExhaustedError(message);
  if (IsStickyCudaError(result))
    return absl::UnavailableError(absl::StrCat("device lost: ", message));
  return absl::InternalError(message);
}

std::string FormatGpuUuid(const CUuuid& uuid) {
  std::string out = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    absl::StrAppendFormat(&out, "%02x", static_cast<unsigned char>(uuid.bytes[i]));
  }
  return out;
}

}  // namespace cubed
