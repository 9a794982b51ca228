// The CPU table: every builtin of the catalogue (kernels/builtin_registry.cc) with the CPU function
// that runs it, listed explicitly in the catalogue's order, and RunBuiltinCpu on top of both.

#include "kernels/cpu/cpu_registry.h"

#include <iterator>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/builtin.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/binary.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/fill_copy_cast.h"
#include "kernels/cpu/gather.h"
#include "kernels/cpu/host_buffers.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/softmax.h"
#include "kernels/cpu/where.h"
#include "kernels/validate.h"

namespace cubed::kernels {
namespace {

constexpr CpuKernel Unary(absl::string_view name, UnaryOp op) {
  return {name, 2, RunUnary, static_cast<int>(op)};
}
constexpr CpuKernel Binary(absl::string_view name, BinaryOp op) {
  return {name, 3, RunBinary, static_cast<int>(op)};
}
constexpr CpuKernel Compare(absl::string_view name, CompareOp op) {
  return {name, 3, RunCompare, static_cast<int>(op)};
}
constexpr CpuKernel Reduce(absl::string_view name, ReduceOp op) {
  return {name, 2, RunReduce, static_cast<int>(op)};
}

// One row per row of kKernels in kernels/builtin_registry.cc, in the same order (CpuRegistryTest
// checks). Columns: name, buffers, implementation, op.
constexpr CpuKernel kCpuKernels[] = {
    Unary("abs", UnaryOp::kAbs),
    Binary("add", BinaryOp::kAdd),
    Reduce("argmax", ReduceOp::kArgmax),
    {"cast", 2, RunCast, 0},
    {"causal_attention", 4, RunCausalAttention, 0},
    {"causal_softmax", 2, RunCausalSoftmax, 0},
    {"copy", 2, RunCopy, 0},
    Binary("div", BinaryOp::kDiv),
    Compare("eq", CompareOp::kEq),
    Unary("exp", UnaryOp::kExp),
    {"fill", 1, RunFill, 0},
    {"gather", 3, RunGather, 0},
    Compare("ge", CompareOp::kGe),
    Unary("gelu", UnaryOp::kGelu),
    Unary("gelu_tanh", UnaryOp::kGeluTanh),
    Compare("gt", CompareOp::kGt),
    {"layer_norm", 2, RunNorm, static_cast<int>(NormOp::kLayer)},
    {"layer_norm", 3, RunNorm, static_cast<int>(NormOp::kLayer)},
    {"layer_norm", 4, RunNorm, static_cast<int>(NormOp::kLayer)},
    Compare("le", CompareOp::kLe),
    Unary("log", UnaryOp::kLog),
    Compare("lt", CompareOp::kLt),
    {"matmul", 3, RunMatmul, 0},
    Reduce("max", ReduceOp::kMax),
    Binary("max", BinaryOp::kMax),
    Reduce("mean", ReduceOp::kMean),
    Reduce("min", ReduceOp::kMin),
    Binary("min", BinaryOp::kMin),
    Binary("mul", BinaryOp::kMul),
    Compare("ne", CompareOp::kNe),
    Unary("neg", UnaryOp::kNeg),
    Binary("pow", BinaryOp::kPow),
    Unary("relu", UnaryOp::kRelu),
    {"rms_norm", 2, RunNorm, static_cast<int>(NormOp::kRms)},
    {"rms_norm", 3, RunNorm, static_cast<int>(NormOp::kRms)},
    Unary("sigmoid", UnaryOp::kSigmoid),
    Unary("silu", UnaryOp::kSilu),
    {"softmax", 2, RunSoftmax, 0},
    Unary("sqrt", UnaryOp::kSqrt),
    Binary("sub", BinaryOp::kSub),
    Reduce("sum", ReduceOp::kSum),
    Unary("tanh", UnaryOp::kTanh),
    {"where", 4, RunWhere, 0},
};

}  // namespace

absl::Span<const CpuKernel> CpuKernels() { return kCpuKernels; }

absl::StatusOr<const CpuKernel*> FindCpuKernel(const KernelDef& def) {
  const size_t index = static_cast<size_t>(&def - BuiltinKernelDefs().data());
  if (index < std::size(kCpuKernels) && kCpuKernels[index].name == def.name &&
      kCpuKernels[index].num_buffers == def.num_buffers) {
    return &kCpuKernels[index];
  }
  return absl::InternalError(absl::StrCat("builtin kernel '", def.name, "' with ", def.num_buffers,
                                          " buffers has no CPU implementation at its catalogue "
                                          "row (the CPU table is out of step with the catalogue)"));
}

absl::Status RunBuiltinCpu(const BuiltinCall& call, absl::Span<const HostBuffer> buffers) {
  absl::InlinedVector<uint64_t, kMaxBuiltinBuffers> sizes;
  for (const HostBuffer& b : buffers) sizes.push_back(b.size_bytes);
  ASSIGN_OR_RETURN(const ValidatedCall v, ValidateBuiltinCall(call, sizes));
  return RunValidatedCpu(*v.def, call, v.meta, buffers);
}

absl::Status RunValidatedCpu(const KernelDef& def, const BuiltinCall& call,
                             const KernelMetadata& meta, absl::Span<const HostBuffer> buffers) {
  ASSIGN_OR_RETURN(const CpuKernel* cpu, FindCpuKernel(def));
  RETURN_IF_ERROR(CheckHostBuffers(def, call, meta, buffers));
  return cpu->run(KernelArgs{call, meta, buffers, cpu->op});
}

}  // namespace cubed::kernels
