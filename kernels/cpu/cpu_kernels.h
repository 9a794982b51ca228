#pragma once

// The CPU side of the kernel library: runs the builtin kernels (kernels/builtin.h) on host memory,
// in parallel across the machine's cores. The CPU backend (server/compute/cpu/cpu_server.cc)
// calls it with the memory of a launch's bindings.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/kernel_metadata.h"
#include "kernels/builtin.h"
#include "kernels/kernel_def.h"

namespace cubed::kernels {

// One buffer binding resolved to host memory (offsets already applied). Borrowed: the caller
// keeps the memory alive for the call.
struct HostBuffer {
  uint8_t* data = nullptr;
  uint64_t size_bytes = 0;
};

// Validates the call (ValidateBuiltin: same errors) and runs it on the host, in parallel across
// the machine's cores. Returns when the outputs are written. Also INVALID_ARGUMENT when a buffer's
// address is not a multiple of its element size, or when the output overlaps an input other than
// exactly (same memory and layout) for an in-place elementwise kernel. Thread-safe; usually called
// on a device's server-loop thread.
absl::Status RunBuiltinCpu(const BuiltinCall& call, absl::Span<const HostBuffer> buffers);

// RunBuiltinCpu of a call already validated for buffers of these sizes: `def` and `meta` as
// ValidatedCalls (kernels/validated_calls.h) or FindKernel and ValidateCall gave them for `call`
// and the buffers' size_bytes. Checks and runs the rest (addresses, overlaps); same errors.
absl::Status RunValidatedCpu(const KernelDef& def, const BuiltinCall& call,
                             const KernelMetadata& meta, absl::Span<const HostBuffer> buffers);

}  // namespace cubed::kernels
