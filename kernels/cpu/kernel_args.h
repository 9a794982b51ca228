#pragma once

// What a CPU implementation of a builtin kernel gets once its call validated (cpu_registry.cc
// runs it): the call, its decoded metadata, the host buffers and the operation of its table row.

#include <cstdint>

#include "absl/types/span.h"
#include "common/kernel_metadata.h"
#include "kernels/builtin.h"
#include "kernels/cpu/cpu_kernels.h"

namespace cubed::kernels {

// Borrowed views, valid for the call. `op` is the CPU table row's family-specific operation (a
// UnaryOp, BinaryOp or ReduceOp value; 0 where the family has one operation).
struct KernelArgs {
  const BuiltinCall& call;
  const KernelMetadata& meta;
  absl::Span<const HostBuffer> buffers;
  int op;
};

// Typed view of buffer `index`; the data pointer is aligned for T (checked before running).
template <typename T>
T* BufferAs(const KernelArgs& args, uint32_t index) {
  return reinterpret_cast<T*>(args.buffers[index].data);
}

}  // namespace cubed::kernels
