#pragma once

// Binary elementwise kernels with broadcasting: [lhs, rhs, out], all of one rank; each input dim
// equals out's or is 1. Any strides.

#include "absl/status/status.h"
#include "kernels/cpu/kernel_args.h"

namespace cubed::kernels {

enum class BinaryOp { kAdd, kSub, kMul, kDiv, kMax, kMin, kPow };

// Runs the BinaryOp `args.op` (pow: f32 f64; the rest: every dtype). The call has been
// validated. In place is fine when out and an input share memory and layout.
absl::Status RunBinary(const KernelArgs& args);

}  // namespace cubed::kernels
