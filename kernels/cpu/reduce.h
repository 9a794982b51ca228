#pragma once

// Reductions along BuiltinCall::axis: [in, out], out has in's rank with shape[axis] == 1.

#include "absl/status/status.h"
#include "kernels/cpu/kernel_args.h"

namespace cubed::kernels {

enum class ReduceOp { kSum, kMax, kMin, kMean, kArgmax };

// Runs the ReduceOp `args.op` (mean: f32 f64; the rest: every dtype; argmax writes i64). The
// call has been validated, including that max/min/argmax never reduce an empty axis.
absl::Status RunReduce(const KernelArgs& args);

}  // namespace cubed::kernels
