#pragma once

// The CPU side of the kernel library: runs the builtin kernels (kernels/builtin.h) on host memory,
// in parallel across the machine's cores. The CPU backend (server/compute/cpu/cpu_server.cc)
// calls it with the memory of a launch's bindings.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kernels/builtin.h"

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

}  // namespace cubed::kernels
