#pragma once

// The CPU table: which CPU function runs each builtin kernel of the catalogue
// (kernels/kernel_def.h), and with which operation. RunBuiltinCpu (cpu_kernels.h) looks a call up
// in both.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/cpu/kernel_args.h"
#include "kernels/kernel_def.h"

namespace cubed::kernels {

// One row of the CPU table: the CPU implementation of the catalogue row of the same name and
// buffer count.
struct CpuKernel {
  absl::string_view name;
  uint32_t num_buffers;
  absl::Status (*run)(const KernelArgs& args);  // Runs a validated call; see kernel_args.h.
  int op;                                       // Passed as KernelArgs::op.
};

// Every row of the CPU table, in the catalogue's order: row i implements BuiltinKernelDefs()[i].
// Static; never changes.
absl::Span<const CpuKernel> CpuKernels();

// The CPU implementation of `def`, which must be a row of BuiltinKernelDefs() (as FindKernel
// returns). INTERNAL when the CPU table is out of step with the catalogue (a bug).
absl::StatusOr<const CpuKernel*> FindCpuKernel(const KernelDef& def);

}  // namespace cubed::kernels
