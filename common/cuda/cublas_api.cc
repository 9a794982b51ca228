#include "common/cuda/cublas_api.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace cubed {
namespace {

template <typename Fn>
bool Resolve(void* library, const char* name, Fn* fn, std::string* missing) {
  *fn = reinterpret_cast<Fn>(dlsym(library, name));
  if (*fn == nullptr && missing->empty()) *missing = name;
  return *fn != nullptr;
}

absl::StatusOr<CublasApi> Open() {
  void* library = nullptr;
  CublasApi api;
  std::string errors;
  for (const char* name : {"libcublas.so.13", "libcublas.so.12"}) {
    // RTLD_LAZY: resolving cuBLAS's many symbols up front would slow every daemon start.
    library = dlopen(name, RTLD_LAZY | RTLD_LOCAL);
    if (library != nullptr) {
      api.library = name;
      break;
    }
    const char* e = dlerror();
    absl::StrAppend(&errors, errors.empty() ? "" : "; ", e != nullptr ? e : name);
  }
  if (library == nullptr) {
    return absl::UnavailableError(absl::StrCat("cuBLAS not available: ", errors));
  }
  std::string missing;
  Resolve(library, "cublasCreate_v2", &api.Create, &missing);
  Resolve(library, "cublasDestroy_v2", &api.Destroy, &missing);
  Resolve(library, "cublasSetStream_v2", &api.SetStream, &missing);
  Resolve(library, "cublasSetMathMode", &api.SetMathMode, &missing);
  Resolve(library, "cublasSgemmStridedBatched", &api.SgemmStridedBatched, &missing);
  Resolve(library, "cublasDgemmStridedBatched", &api.DgemmStridedBatched, &missing);
  Resolve(library, "cublasGemmStridedBatchedEx", &api.GemmStridedBatchedEx, &missing);
  if (!missing.empty()) {
    // The library stays mapped (unloading cuBLAS is not worth the risk); it is unused.
    return absl::UnavailableError(
        absl::StrCat("cuBLAS not available: ", api.library, " has no symbol ", missing));
  }
  return api;
}

}  // namespace

absl::StatusOr<const CublasApi*> LoadCublas() {
  static const absl::StatusOr<CublasApi>* const loaded = [] {
    auto* api = new absl::StatusOr<CublasApi>(Open());
    if (api->ok()) {
      spdlog::info("cuBLAS loaded from {}: builtin matmul (f32, f64, f16, bf16) runs through it",
                   (*api)->library);
    } else {
      spdlog::info("{}; builtin matmul uses cubed's own kernel",
                   std::string(api->status().message()));
    }
    return api;
  }();
  if (!loaded->ok()) return loaded->status();
  return &**loaded;
}

std::string CublasStatusName(CublasStatus status) {
  switch (status) {
    case 0:
      return "CUBLAS_STATUS_SUCCESS";
    case 1:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case 3:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case 7:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case 8:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case 11:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case 13:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case 14:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case 15:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case 16:
      return "CUBLAS_STATUS_LICENSE_ERROR";
    default:
      return absl::StrCat("cublasStatus ", status);
  }
}

absl::Status CublasToStatus(CublasStatus status, const char* call) {
  if (status == kCublasSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(call, " failed: ", CublasStatusName(status)));
}

}  // namespace cubed
