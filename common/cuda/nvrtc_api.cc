#include "common/cuda/nvrtc_api.h"

#include <dlfcn.h>

#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cubed::kernels {
namespace {

constexpr const char* kLibraryNames[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
constexpr const char* kFallbackDir = "/usr/local/cuda/lib64/";

template <typename Fn>
absl::Status Resolve(void* handle, const char* name, Fn* fn, const std::string& library) {
  *fn = reinterpret_cast<Fn>(dlsym(handle, name));
  if (*fn == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("NVRTC library ", library, " lacks symbol ", name));
  }
  return absl::OkStatus();
}

absl::StatusOr<NvrtcApi> LoadOnce() {
  std::vector<std::string> tried;
  std::string last_error;
  void* handle = nullptr;
  NvrtcApi api;
  for (const std::string& prefix : {std::string(), std::string(kFallbackDir)}) {
    for (const char* name : kLibraryNames) {
      const std::string path = prefix + name;
      handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle != nullptr) {
        api.library = path;
        break;
      }
      tried.push_back(path);
      const char* err = dlerror();
      if (err != nullptr) last_error = err;
    }
    if (handle != nullptr) break;
  }
  if (handle == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot load NVRTC (the CUDA runtime compiler, needed to compile CUDA kernels): tried ",
        absl::StrJoin(tried, ", "), "; last error: ", last_error,
        ". Install the CUDA toolkit's NVRTC (e.g. Debian package libnvrtc12 or cuda-nvrtc-13-0)"));
  }
#define CUBED_RESOLVE(field, symbol)                                    \
  do {                                                                  \
    absl::Status s = Resolve(handle, #symbol, &api.field, api.library); \
    if (!s.ok()) return s;                                              \
  } while (false)
  CUBED_RESOLVE(GetErrorString, nvrtcGetErrorString);
  CUBED_RESOLVE(Version, nvrtcVersion);
  CUBED_RESOLVE(GetNumSupportedArchs, nvrtcGetNumSupportedArchs);
  CUBED_RESOLVE(GetSupportedArchs, nvrtcGetSupportedArchs);
  CUBED_RESOLVE(CreateProgram, nvrtcCreateProgram);
  CUBED_RESOLVE(DestroyProgram, nvrtcDestroyProgram);
  CUBED_RESOLVE(CompileProgram, nvrtcCompileProgram);
  CUBED_RESOLVE(GetPTXSize, nvrtcGetPTXSize);
  CUBED_RESOLVE(GetPTX, nvrtcGetPTX);
  CUBED_RESOLVE(GetCUBINSize, nvrtcGetCUBINSize);
  CUBED_RESOLVE(GetCUBIN, nvrtcGetCUBIN);
  CUBED_RESOLVE(GetProgramLogSize, nvrtcGetProgramLogSize);
  CUBED_RESOLVE(GetProgramLog, nvrtcGetProgramLog);
  CUBED_RESOLVE(AddNameExpression, nvrtcAddNameExpression);
  CUBED_RESOLVE(GetLoweredName, nvrtcGetLoweredName);
#undef CUBED_RESOLVE
  const nvrtcResult r = api.Version(&api.version_major, &api.version_minor);
  if (r != NVRTC_SUCCESS) {
    return absl::FailedPreconditionError(absl::StrCat(
        "NVRTC library ", api.library, ": nvrtcVersion failed: ", api.GetErrorString(r)));
  }
  return api;
}

}  // namespace

absl::StatusOr<const NvrtcApi*> NvrtcApi::Load() {
  static const auto* const loaded = new absl::StatusOr<NvrtcApi>(LoadOnce());
  if (!loaded->ok()) return loaded->status();
  return &**loaded;
}

absl::Status NvrtcError(const NvrtcApi& api, nvrtcResult result, absl::string_view call,
                        absl::string_view file, int line) {
  const char* text = api.GetErrorString != nullptr ? api.GetErrorString(result) : nullptr;
  return absl::InternalError(
      absl::StrCat(call, " failed: ", text != nullptr ? text : "unknown NVRTC error", " (",
                   static_cast<int>(result), ") at ", file, ":", line));
}

}  // namespace cubed::kernels
