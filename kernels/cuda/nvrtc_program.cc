#include "kernels/cuda/nvrtc_program.h"

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"

namespace cubed::kernels {
namespace {

absl::StatusOr<std::string> ProgramLog(const NvrtcApi& api, nvrtcProgram prog) {
  size_t size = 0;
  NVRTC_RETURN_IF_ERROR(api, api.GetProgramLogSize(prog, &size));
  std::string log(size, '\0');
  if (size > 0) NVRTC_RETURN_IF_ERROR(api, api.GetProgramLog(prog, log.data()));
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

}  // namespace

absl::StatusOr<NvrtcOutput> CompileWithNvrtc(const NvrtcApi& api, const NvrtcInput& input) {
  std::vector<const char*> header_texts, header_names, options;
  for (const auto& [name, text] : input.headers) {
    header_names.push_back(name.c_str());
    header_texts.push_back(text.c_str());
  }
  for (const std::string& o : input.options) options.push_back(o.c_str());
  nvrtcProgram prog = nullptr;
  NVRTC_RETURN_IF_ERROR(api, api.CreateProgram(&prog, input.source.c_str(), input.name.c_str(),
                                               static_cast<int>(header_texts.size()),
                                               header_texts.data(), header_names.data()));
  absl::Cleanup destroy = [&] { api.DestroyProgram(&prog); };
  for (const std::string& e : input.expressions) {
    NVRTC_RETURN_IF_ERROR(api, api.AddNameExpression(prog, e.c_str()));
  }
  const nvrtcResult compiled =
      api.CompileProgram(prog, static_cast<int>(options.size()), options.data());
  NvrtcOutput out;
  auto log = ProgramLog(api, prog);
  if (!log.ok()) return log.status();
  out.log = *std::move(log);
  if (compiled == NVRTC_ERROR_COMPILATION || compiled == NVRTC_ERROR_INVALID_OPTION ||
      compiled == NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID) {
    return absl::InvalidArgumentError(absl::StrCat("NVRTC compilation of ", input.name, " failed (",
                                                   api.GetErrorString(compiled), "):\n", out.log));
  }
  NVRTC_RETURN_IF_ERROR(api, compiled);
  size_t size = 0;
  if (input.cubin) {
    NVRTC_RETURN_IF_ERROR(api, api.GetCUBINSize(prog, &size));
    out.image.resize(size);
    if (size > 0) NVRTC_RETURN_IF_ERROR(api, api.GetCUBIN(prog, out.image.data()));
    out.is_cubin = true;
  } else {
    NVRTC_RETURN_IF_ERROR(api, api.GetPTXSize(prog, &size));
    out.image.resize(size);
    if (size > 0) NVRTC_RETURN_IF_ERROR(api, api.GetPTX(prog, out.image.data()));
    if (out.image.empty() || out.image.back() != '\0') out.image.push_back('\0');
  }
  for (const std::string& e : input.expressions) {
    const char* lowered = nullptr;
    NVRTC_RETURN_IF_ERROR(api, api.GetLoweredName(prog, e.c_str(), &lowered));
    out.lowered.emplace_back(e, lowered);
  }
  return out;
}

}  // namespace cubed::kernels
