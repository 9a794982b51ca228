#pragma once

// Gather along an axis (numpy.take, torch.index_select): [table, indices, out] with out.shape =
// table.shape[:axis] + indices.shape + table.shape[axis + 1:].

#include "absl/status/status.h"
#include "kernels/cpu/kernel_args.h"

namespace cubed::kernels {

// out[o..., j..., i...] = table[o..., k, i...] with k = indices[j...] (i32 or i64, the call's
// index_dtype); k in [-n, 0) counts from the end (k + n), any other k outside [0, n) writes zeros
// (n = table.shape[axis]). Moves bits, as copy does. Validated call; out overlaps no input.
absl::Status RunGather(const KernelArgs& args);

}  // namespace cubed::kernels
