#pragma once

// causal_attention: softmax(scale * q k^T) v over the keys each query sees, in one kernel.

#include "absl/status/status.h"
#include "kernels/cpu/kernel_args.h"

namespace cubed::kernels {

// q [..., L, E], k [..., S, E], v [..., S, Ev] -> out [..., L, Ev], batch dims broadcast, any
// strides, any float type: out[..., i, :] = sum over s <= i (s < S) of p_s v[..., s, :], p the
// softmax over those keys of scale * q[..., i, :] . k[..., s, :] (the causal rule of
// causal_softmax, Note [Causal rows] in softmax.cc: every query sees key 0). S = 0 gives zeros;
// NaN or +inf among a row's scores gives NaN. f16 and bf16 compute in f32 and round once on the
// store; f32 and f64 in their own type, the softmax's sum in f64. Validated call; out does not
// alias an input.
absl::Status RunCausalAttention(const KernelArgs& args);

}  // namespace cubed::kernels
