#pragma once

// NVRTC loaded at run time with dlopen, so that the daemon runs (CPU backend) on machines without
// the CUDA toolkit and never links libnvrtc. Only <nvrtc.h>'s types are used at build time.

#include <nvrtc.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cubed::kernels {

// The NVRTC entry points cubed uses, resolved from the loaded library.
struct NvrtcApi {
  std::string library;  // The name or path that dlopen accepted, e.g. "libnvrtc.so.13".
  int version_major = 0;
  int version_minor = 0;

  decltype(&::nvrtcGetErrorString) GetErrorString = nullptr;
  decltype(&::nvrtcVersion) Version = nullptr;
  decltype(&::nvrtcGetNumSupportedArchs) GetNumSupportedArchs = nullptr;
  decltype(&::nvrtcGetSupportedArchs) GetSupportedArchs = nullptr;
  decltype(&::nvrtcCreateProgram) CreateProgram = nullptr;
  decltype(&::nvrtcDestroyProgram) DestroyProgram = nullptr;
  decltype(&::nvrtcCompileProgram) CompileProgram = nullptr;
  decltype(&::nvrtcGetPTXSize) GetPTXSize = nullptr;
  decltype(&::nvrtcGetPTX) GetPTX = nullptr;
  decltype(&::nvrtcGetCUBINSize) GetCUBINSize = nullptr;
  decltype(&::nvrtcGetCUBIN) GetCUBIN = nullptr;
  decltype(&::nvrtcGetProgramLogSize) GetProgramLogSize = nullptr;
  decltype(&::nvrtcGetProgramLog) GetProgramLog = nullptr;
  decltype(&::nvrtcAddNameExpression) AddNameExpression = nullptr;
  decltype(&::nvrtcGetLoweredName) GetLoweredName = nullptr;

  // Loads NVRTC once per process (libnvrtc.so.13, then .so.12, then libnvrtc.so, each by name and
  // then from /usr/local/cuda/lib64) and returns the process-wide table, never unloaded.
  // Thread-safe. FAILED_PRECONDITION naming the libraries tried (and dlerror) when none loads or
  // a symbol is missing; every later call returns the same status.
  static absl::StatusOr<const NvrtcApi*> Load();
};

// The status for a failed NVRTC call: INTERNAL "<call> failed: <NVRTC error string> (file:line)".
absl::Status NvrtcError(const NvrtcApi& api, nvrtcResult result, absl::string_view call,
                        absl::string_view file, int line);

}  // namespace cubed::kernels

// Evaluates `call` (an expression of type nvrtcResult, e.g. api.CompileProgram(...)) and returns
// NvrtcError(...) from the enclosing function when it is not NVRTC_SUCCESS.
#define NVRTC_RETURN_IF_ERROR(api, call)                                                          \
  do {                                                                                            \
    const nvrtcResult cubed_nvrtc_result_ = (call);                                               \
    if (cubed_nvrtc_result_ != NVRTC_SUCCESS) {                                                   \
      return ::cubed::kernels::NvrtcError((api), cubed_nvrtc_result_, #call, __FILE__, __LINE__); \
    }                                                                                             \
  } while (false)
