// The builtin kernel table: every kernel the CPU backend runs, listed explicitly (no static
// self-registration), and the entry points of builtin.h on top of it.

#include <algorithm>
#include <iterator>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/binary.h"
#include "kernels/builtin.h"
#include "kernels/elementwise.h"
#include "kernels/fill_copy_cast.h"
#include "kernels/host_buffers.h"
#include "kernels/kernel_def.h"
#include "kernels/matmul.h"
#include "kernels/reduce.h"
#include "kernels/softmax.h"
#include "kernels/validate.h"

namespace cubed::kernels {
namespace {

constexpr std::array<absl::string_view, 3> kOut = {"out"};
constexpr std::array<absl::string_view, 3> kInOut = {"in", "out"};
constexpr std::array<absl::string_view, 3> kBinary = {"lhs", "rhs", "out"};
constexpr std::array<absl::string_view, 3> kMatmul = {"a", "b", "out"};
constexpr DtypeMask kI64Mask = DtypeBit(ElemType::kI64);

constexpr int Op(UnaryOp op) { return static_cast<int>(op); }
constexpr int Op(BinaryOp op) { return static_cast<int>(op); }
constexpr int Op(ReduceOp op) { return static_cast<int>(op); }

constexpr KernelDef Unary(absl::string_view name, DtypeMask dtypes, UnaryOp op) {
  return {name, 2,     kInOut, dtypes, ShapeRule::kSame, OutType::kDtype,
          0,    false, true,   false,  Op(op),           RunUnary};
}
constexpr KernelDef Binary(absl::string_view name, DtypeMask dtypes, BinaryOp op) {
  return {name, 3,     kBinary, dtypes,   ShapeRule::kBroadcast, OutType::kDtype, 0, false,
          true, false, Op(op),  RunBinary};
}
constexpr KernelDef Reduce(absl::string_view name, DtypeMask dtypes, ReduceOp op) {
  return {name,
          2,
          kInOut,
          dtypes,
          ShapeRule::kReduce,
          op == ReduceOp::kArgmax ? OutType::kI64 : OutType::kDtype,
          1,
          false,
          false,
          op == ReduceOp::kMax || op == ReduceOp::kMin || op == ReduceOp::kArgmax,
          Op(op),
          RunReduce};
}

// Sorted by name. "max" and "min" appear twice: elementwise with 3 buffers, reductions with 2.
// Columns: name, buffers, buffer names, dtypes, shape rule, output type, min rank, fill scalar,
// in place, non-empty axis, op, implementation.
constexpr KernelDef kKernels[] = {
    Unary("abs", kSignedTypes, UnaryOp::kAbs),
    Binary("add", kAllTypes, BinaryOp::kAdd),
    Reduce("argmax", kAllTypes, ReduceOp::kArgmax),
    {"cast", 2, kInOut, kAllTypes, ShapeRule::kSame, OutType::kOutDtype, 0, false, true, false, 0,
     RunCast},
    {"copy", 2, kInOut, kAllTypes, ShapeRule::kSame, OutType::kDtype, 0, false, true, false, 0,
     RunCopy},
    Binary("div", kAllTypes, BinaryOp::kDiv),
    Unary("exp", kFloatTypes, UnaryOp::kExp),
    {"fill", 1, kOut, kAllTypes, ShapeRule::kAny, OutType::kDtype, 0, true, false, false, 0,
     RunFill},
    Unary("log", kFloatTypes, UnaryOp::kLog),
    {"matmul", 3, kMatmul, kAllTypes, ShapeRule::kMatmul, OutType::kDtype, 2, false, false, false,
     0, RunMatmul},
    Reduce("max", kAllTypes, ReduceOp::kMax),
    Binary("max", kAllTypes, BinaryOp::kMax),
    Reduce("mean", kFloatTypes, ReduceOp::kMean),
    Reduce("min", kAllTypes, ReduceOp::kMin),
    Binary("min", kAllTypes, BinaryOp::kMin),
    Binary("mul", kAllTypes, BinaryOp::kMul),
    Unary("neg", kSignedTypes, UnaryOp::kNeg),
    Binary("pow", kFloatTypes, BinaryOp::kPow),
    Unary("relu", kSignedTypes, UnaryOp::kRelu),
    Unary("sigmoid", kFloatTypes, UnaryOp::kSigmoid),
    {"softmax", 2, kInOut, kFloatTypes, ShapeRule::kSame, OutType::kDtype, 1, false, true, false, 0,
     RunSoftmax},
    Unary("sqrt", kFloatTypes, UnaryOp::kSqrt),
    Binary("sub", kAllTypes, BinaryOp::kSub),
    Reduce("sum", kAllTypes, ReduceOp::kSum),
    Unary("tanh", kFloatTypes, UnaryOp::kTanh),
};

std::string BufferList(const KernelDef& def) {
  std::string s;
  for (uint32_t i = 0; i < def.num_buffers; ++i) {
    absl::StrAppend(&s, i == 0 ? "" : ", ", def.buffer_names[i]);
  }
  return s;
}

// The entry for `name` taking `num_buffers` buffers. NOT_FOUND for an unknown name,
// INVALID_ARGUMENT naming the expected buffers for a wrong count.
absl::StatusOr<const KernelDef*> FindKernel(absl::string_view name, size_t num_buffers) {
  const auto range = std::equal_range(
      std::begin(kKernels), std::end(kKernels), name, [](const auto& x, const auto& y) {
        if constexpr (std::is_same_v<std::decay_t<decltype(x)>, KernelDef>) {
          return x.name < y;
        } else {
          return x < y.name;
        }
      });
  if (range.first == range.second) {
    return absl::NotFoundError(absl::StrCat("unknown builtin kernel '", name.substr(0, 100),
                                            "' (docs/kernel-abi.md lists the builtin kernels)"));
  }
  std::string expected;
  for (auto it = range.first; it != range.second; ++it) {
    if (it->num_buffers == num_buffers) return &*it;
    absl::StrAppend(&expected, expected.empty() ? "" : " or ", it->num_buffers, " buffers (",
                    BufferList(*it), ")");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("kernel '", name, "' takes ", expected, ", got ", num_buffers));
}

}  // namespace

ElemType BufferElemType(const KernelDef& def, const BuiltinCall& call, uint32_t index) {
  if (index + 1 < def.num_buffers) return call.dtype;
  switch (def.out_type) {
    case OutType::kDtype:
      return call.dtype;
    case OutType::kOutDtype:
      return call.out_dtype;
    case OutType::kI64:
      return ElemType::kI64;
  }
  return call.dtype;
}

std::vector<std::string> BuiltinKernelNames() {
  std::vector<std::string> names;
  for (const KernelDef& def : kKernels) {
    if (names.empty() || names.back() != def.name) names.emplace_back(def.name);
  }
  return names;
}

absl::Status ValidateBuiltin(const BuiltinCall& call, absl::Span<const uint64_t> buffer_bytes) {
  ASSIGN_OR_RETURN(const KernelDef* def, FindKernel(call.name, buffer_bytes.size()));
  return ValidateCall(*def, call, buffer_bytes).status();
}

absl::Status RunBuiltinCpu(const BuiltinCall& call, absl::Span<const HostBuffer> buffers) {
  ASSIGN_OR_RETURN(const KernelDef* def, FindKernel(call.name, buffers.size()));
  absl::InlinedVector<uint64_t, 3> sizes;
  for (const HostBuffer& b : buffers) sizes.push_back(b.size_bytes);
  ASSIGN_OR_RETURN(const KernelMetadata meta, ValidateCall(*def, call, sizes));
  RETURN_IF_ERROR(CheckHostBuffers(*def, call, meta, buffers));
  return def->run(KernelArgs{call, meta, buffers, def->op});
}

}  // namespace cubed::kernels
