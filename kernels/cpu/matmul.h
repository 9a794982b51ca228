#pragma once

// Batched matrix multiply: [a, b, out], one rank >= 2; a [..., M, K], b [..., K, N],
// out [..., M, N]; each batch dim of a and b equals out's or is 1 (broadcast).

#include "absl/status/status.h"
#include "kernels/cpu/kernel_args.h"

namespace cubed::kernels {

// Computes out = a x b (f32, f64, i32, u32, i64; integers wrap). K == 0 writes zeros. Validated
// call; out must not overlap a or b. Parallel over blocks of output rows of every batch.
absl::Status RunMatmul(const KernelArgs& args);

}  // namespace cubed::kernels
