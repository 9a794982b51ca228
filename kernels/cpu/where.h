#pragma once

// where(cond, x, y) -> out: out = cond ? x : y elementwise, with broadcasting. cond is bool, x, y
// and out have the call's dtype; all four have one rank and each input dim equals out's or is 1.
// Any strides.

#include "absl/status/status.h"
#include "kernels/cpu/kernel_args.h"

namespace cubed::kernels {

// Runs where on a validated call of any dtype. Copies the chosen element's bits (NaN payloads and
// -0 kept); any non-zero cond byte is true. In place is fine when out shares memory and layout
// with x or y (or with cond, for 1-byte dtypes).
absl::Status RunWhere(const KernelArgs& args);

}  // namespace cubed::kernels
