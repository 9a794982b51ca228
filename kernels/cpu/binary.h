#pragma once

// Binary elementwise kernels with broadcasting: [lhs, rhs, out], all of one rank; each input dim
// equals out's or is 1. Any strides. Arithmetic writes the inputs' type, comparisons bool.

#include "absl/status/status.h"
#include "kernels/cpu/kernel_args.h"

namespace cubed::kernels {

enum class BinaryOp { kAdd, kSub, kMul, kDiv, kMax, kMin, kPow };

// Runs the BinaryOp `args.op` (pow: floats; max, min: every dtype; the rest: numeric). The call
// has been validated. In place is fine when out and an input share memory and layout.
absl::Status RunBinary(const KernelArgs& args);

enum class CompareOp { kEq, kNe, kLt, kLe, kGt, kGe };

// Runs the CompareOp `args.op` on inputs of any dtype, writing bool (0 or 1). Floats compare as
// IEEE 754 does (NaN is unequal to everything, itself included, and unordered: only ne is true;
// -0 == +0), f16/bf16 by value, bool as false < true (any non-zero byte is true). The call has
// been validated; in place as RunBinary (only for 1-byte dtypes).
absl::Status RunCompare(const KernelArgs& args);

}  // namespace cubed::kernels
