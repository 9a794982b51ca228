#pragma once

// Unary elementwise kernels: [in, out] of the same shape, any strides.

#include "absl/status/status.h"
#include "kernels/cpu/kernel_args.h"

namespace cubed::kernels {

enum class UnaryOp {
  kNeg,
  kAbs,
  kRelu,
  kExp,
  kLog,
  kSqrt,
  kSigmoid,
  kTanh,
  kGelu,
  kGeluTanh,
  kSilu
};

// Runs the UnaryOp `args.op` (neg, abs, relu: signed types; the rest: floats). The call has been
// validated. In place is fine when out and in share memory and layout.
absl::Status RunUnary(const KernelArgs& args);

}  // namespace cubed::kernels
