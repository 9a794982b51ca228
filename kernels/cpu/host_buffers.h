#pragma once

// The checks a validated call needs before it runs on host memory: what ValidateCall cannot see
// from buffer sizes alone.

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/kernel_metadata.h"
#include "kernels/builtin.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/kernel_def.h"

namespace cubed::kernels {

// Checks the host memory of a call that ValidateCall accepted (`meta` is what it returned): every
// non-empty buffer aligned to its element size, and the output overlapping no input (except in
// place, where `def` allows it, with the very same memory and layout). INVALID_ARGUMENT naming
// the buffer; INTERNAL for a non-empty buffer without memory.
absl::Status CheckHostBuffers(const KernelDef& def, const BuiltinCall& call,
                              const KernelMetadata& meta, absl::Span<const HostBuffer> buffers);

}  // namespace cubed::kernels
