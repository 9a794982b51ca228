#pragma once

// layer_norm and rms_norm over the last axis: [in, out], [in, weight, out] or (layer_norm)
// [in, weight, bias, out], weight and bias 1-D of the last dim's length; floats.

#include "absl/status/status.h"
#include "kernels/cpu/kernel_args.h"

namespace cubed::kernels {

// Which norm a CPU table row runs (its KernelArgs::op).
enum class NormOp : int { kLayer, kRms };

// Every row r of in (the last axis, of length n > 0) to out[r] = (in[r] - mean) * rstd, times
// weight and plus bias where bound. layer_norm: mean and var the row's mean and biased variance,
// rstd = 1 / sqrt(var + eps); rms_norm: mean 0, rstd = 1 / sqrt(sum(x^2) / n + eps). f32 and f64
// compute in f64, f16 and bf16 in f32; each output rounds once. Validated call (eps is the single
// scalar); in place is fine with an identical layout. docs/kernel-abi.md has the edge cases.
absl::Status RunNorm(const KernelArgs& args);

}  // namespace cubed::kernels
