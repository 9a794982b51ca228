#pragma once

// Data movement kernels: fill [out] with one scalar, copy [in, out], cast [in, out] between any
// two element types (convert.h gives the conversion rules). Any strides.

#include "absl/status/status.h"
#include "kernels/cpu/kernel_args.h"

namespace cubed::kernels {

// Writes the call's single scalar into every element of the output. Validated call.
absl::Status RunFill(const KernelArgs& args);

// Copies in to out element by element (same shape, any layouts). Validated call.
absl::Status RunCopy(const KernelArgs& args);

// Converts in (dtype) to out (out_dtype) element by element. Validated call.
absl::Status RunCast(const KernelArgs& args);

}  // namespace cubed::kernels
