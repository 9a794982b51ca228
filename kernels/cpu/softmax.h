#pragma once

// Softmax over the last axis: [in, out] of the same shape (rank >= 1), any float type; and
// causal_softmax, the same over the lower triangle of the last two dims, scaled.

#include "absl/status/status.h"
#include "kernels/cpu/kernel_args.h"

namespace cubed::kernels {

// out[..., i] = exp(in[..., i] - m) / sum_j exp(in[..., j] - m), m the row's maximum, so no
// exponent overflows. A row holding NaN gives NaN; a row of -inf gives NaN (0/0). Validated call;
// in place is fine with an identical layout.
absl::Status RunSoftmax(const KernelArgs& args);

// out[..., q, k] = softmax over k <= q of scale * in[..., q, k], and 0 for k > q (Note [Causal
// rows] in softmax.cc): the attention probabilities of a causal mask, scale the call's one float
// scalar. Rank >= 2; otherwise as RunSoftmax.
absl::Status RunCausalSoftmax(const KernelArgs& args);

}  // namespace cubed::kernels
