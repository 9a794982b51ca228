#pragma once

// One NVRTC compilation: CUDA C++ source (plus in-memory headers) to a CUBIN or PTX image and the
// lowered names of requested name expressions.

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/cuda/nvrtc_api.h"

namespace cubed::kernels {

struct NvrtcInput {
  std::string name;  // Program name, shown in NVRTC messages (e.g. "reduce_f32.cu").
  std::string source;
  std::vector<std::pair<std::string, std::string>> headers;  // (include name, text).
  std::vector<std::string> options;
  std::vector<std::string> expressions;  // Name expressions to instantiate and lower.
  bool cubin = true;                     // CUBIN (needs a real sm_ arch) or PTX.
};

// What the driver needs to load the program, and what NVRTC said.
struct NvrtcOutput {
  std::string image;  // CUBIN bytes, or PTX text including its terminating NUL.
  bool is_cubin = false;
  std::string log;                                           // Warnings; empty when none.
  std::vector<std::pair<std::string, std::string>> lowered;  // (expression, lowered name).
};

// Compiles `input`. INVALID_ARGUMENT "NVRTC compilation of <name> failed:\n<log>" when the source
// or an option is rejected; INTERNAL (NVRTC_RETURN_IF_ERROR) for any other NVRTC failure.
absl::StatusOr<NvrtcOutput> CompileWithNvrtc(const NvrtcApi& api, const NvrtcInput& input);

}  // namespace cubed::kernels
