#include "server/compute/cuda/cuda_launch.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/cuda/cuda_driver.h"
#include "common/status_macros.h"

namespace cubed {
namespace {

uint64_t SpanBytes(const CudaTensorArg& t, uint32_t elem_size) {
  uint64_t span = 1;
  for (uint32_t d = 0; d < t.rank; ++d) {
    if (t.shape[d] == 0) return 0;
    span += (t.shape[d] - 1) * t.strides[d];  // Fits: checked by ValidateBuiltin.
  }
  return span * elem_size;
}

bool SameLayout(const CudaTensorArg& a, const CudaTensorArg& b) {
  if (a.rank != b.rank) return false;
  for (uint32_t d = 0; d < a.rank; ++d) {
    if (a.shape[d] != b.shape[d] || a.strides[d] != b.strides[d]) return false;
  }
  return true;
}

}  // namespace

CudaModuleCache::~CudaModuleCache() {
  for (auto& [key, entry] : modules_) Cu().ModuleUnload(entry.module);
}

absl::StatusOr<CUfunction> CudaModuleCache::Function(const kernels::CompiledCudaKernel& kernel) {
  const std::string key = absl::StrCat(kernel.cache_key, "/", kernel.entry_point);
  auto it = modules_.find(key);
  if (it != modules_.end()) {
    it->second.last_use = ++clock_;
    return it->second.function;
  }
  if (modules_.size() >= max_modules_) {
    auto oldest = modules_.begin();
    for (auto e = modules_.begin(); e != modules_.end(); ++e) {
      if (e->second.last_use < oldest->second.last_use) oldest = e;
    }
    CU_RETURN_IF_ERROR(Cu().StreamSynchronize(stream_));
    if (before_unload_) before_unload_();
    Cu().ModuleUnload(oldest->second.module);
    modules_.erase(oldest);
    ++evictions_;
  }
  Entry entry;
  const CUresult loaded = Cu().ModuleLoadData(&entry.module, kernel.image.data());
  if (loaded != CUDA_SUCCESS) {
    absl::Status status = CU_STATUS(loaded);
    if (IsStickyCudaError(loaded) || loaded == CUDA_ERROR_OUT_OF_MEMORY) return status;
    return absl::InvalidArgumentError(absl::StrCat("the CUDA driver cannot load the kernel's ",
                                                   kernel.is_cubin ? "CUBIN" : "PTX",
                                                   " image: ", status.message()));
  }
  const CUresult found =
      Cu().ModuleGetFunction(&entry.function, entry.module, kernel.entry_point.c_str());
  if (found != CUDA_SUCCESS) {
    Cu().ModuleUnload(entry.module);
    if (found == CUDA_ERROR_NOT_FOUND) {
      return absl::InvalidArgumentError(absl::StrCat(
          "entry_point: no kernel named '", kernel.entry_point,
          "' in the module (declare it extern \"C\" __global__ so that its name is not mangled)"));
    }
    return CU_STATUS(found);
  }
  entry.last_use = ++clock_;
  modules_.emplace(key, entry);
  return entry.function;
}

absl::Status CheckBuiltinAddresses(const kernels::KernelDef& def, const kernels::BuiltinCall& call,
                                   const CudaBuiltinArgs& args) {
  const uint32_t n = args.num_buffers;
  if (n != def.num_buffers || n == 0 || n > CUBED_CUDA_MAX_BUFFERS) {
    return absl::InternalError(absl::StrCat("kernel '", call.name, "': ", n,
                                            " buffers where its definition has ", def.num_buffers));
  }
  const kernels::BuiltinBuffers buffers = kernels::BuiltinBufferTypes(def, call);
  uint64_t span[CUBED_CUDA_MAX_BUFFERS] = {};
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t es = ElemSize(buffers.types[i]);
    span[i] = SpanBytes(args.buffers[i], es);
    if (span[i] != 0 && args.buffers[i].ptr % es != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("kernel '", call.name, "': buffer ", i, " is not aligned to its ", es,
                       "-byte elements; bind it at an offset that is a multiple of ", es));
    }
  }
  const uint32_t out = n - 1;
  const uint64_t o = args.buffers[out].ptr;
  for (uint32_t i = 0; i < out; ++i) {
    const uint64_t p = args.buffers[i].ptr;
    if (span[i] == 0 || span[out] == 0 || p >= o + span[out] || o >= p + span[i]) continue;
    const bool identical = buffers.in_place && p == o && span[i] == span[out] &&
                           ElemSize(buffers.types[i]) == ElemSize(buffers.types[out]) &&
                           SameLayout(args.buffers[i], args.buffers[out]);
    if (!identical) {
      return absl::InvalidArgumentError(absl::StrCat(
          "kernel '", call.name, "': the output (buffer ", out, ") overlaps buffer ", i,
          " in memory; only elementwise kernels may write in place, and only onto an input "
          "with the same memory and layout"));
    }
  }
  return absl::OkStatus();
}

ClientKernelParams::ClientKernelParams(absl::Span<const CUdeviceptr> buffers, CUdeviceptr metadata,
                                       absl::Span<const kernels::ScalarGroup> scalars) {
  pointers_.assign(buffers.begin(), buffers.end());
  pointers_.push_back(metadata);
  for (size_t i = 0; i < pointers_.size(); ++i) sizes_.push_back(sizeof(CUdeviceptr));
  for (const kernels::ScalarGroup& group : scalars) {
    scalars_.emplace_back(group.bytes.begin(), group.bytes.end());
    // A kernel parameter cannot be empty: an empty group still passes one zero element.
    if (scalars_.back().empty()) scalars_.back().assign(ElemSize(group.elem), 0);
    scalar_names_.push_back(absl::StrCat(ElemTypeName(group.elem), "[",
                                         scalars_.back().size() / ElemSize(group.elem), "]"));
    sizes_.push_back(scalars_.back().size());
  }
  for (CUdeviceptr& p : pointers_) params_.push_back(&p);
  for (std::vector<uint8_t>& s : scalars_) params_.push_back(s.data());
}

std::string ClientKernelParams::Describe() const {
  std::string text = absl::StrCat(pointers_.size() - 1,
                                  " buffer pointers (8 bytes each), the "
                                  "metadata pointer (8 bytes)");
  for (size_t i = 0; i < scalars_.size(); ++i) {
    absl::StrAppend(&text, ", scalars ", scalar_names_[i], " (", scalars_[i].size(), " bytes)");
  }
  return text;
}

absl::Status CheckClientParams(CUfunction function, absl::string_view entry_point,
                               const ClientKernelParams& params) {
  if (Cu().FuncGetParamInfo == nullptr) return absl::OkStatus();
  const std::vector<uint64_t>& sizes = params.sizes();
  std::vector<std::string> declared;
  bool mismatch = false;
  for (size_t i = 0;; ++i) {
    size_t offset = 0, size = 0;
    const CUresult r = Cu().FuncGetParamInfo(function, i, &offset, &size);
    if (r == CUDA_ERROR_INVALID_VALUE) break;  // Past the last parameter.
    CU_RETURN_IF_ERROR(r);
    declared.push_back(absl::StrCat(size));
    if (i >= sizes.size() || sizes[i] != size) mismatch = true;
  }
  if (!mismatch && declared.size() == sizes.size()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("kernel '", entry_point, "' declares ", declared.size(), " parameters of [",
                   absl::StrJoin(declared, ", "), "] bytes, but the launch passes ", sizes.size(),
                   " (", params.Describe(), "); see docs/kernel-abi.md, \"CUDA kernels\""));
}

}  // namespace cubed
