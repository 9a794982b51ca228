#pragma once

// Softmax over the last axis: [in, out] of the same shape (rank >= 1), f32 or f64.

#include "absl/status/status.h"
#include "kernels/cpu/kernel_args.h"

namespace cubed::kernels {

// out[..., i] = exp(in[..., i] - m) / sum_j exp(in[..., j] - m), m the row's maximum, so no
// exponent overflows. A row holding NaN gives NaN; a row of -inf gives NaN (0/0). Validated call;
// in place is fine with an identical layout.
absl::Status RunSoftmax(const KernelArgs& args);

}  // namespace cubed::kernels
