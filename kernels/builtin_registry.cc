// The builtin kernel catalogue: every builtin kernel, listed explicitly (no static
// self-registration), with the rules a call must follow, and the entry points of builtin.h on top
// of it. Each backend implements every row: kernels/cpu/cpu_registry.cc,
// kernels/cuda/builtin_catalog.cc.

#include <algorithm>
#include <iterator>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/builtin.h"
#include "kernels/kernel_def.h"
#include "kernels/validate.h"

namespace cubed::kernels {
namespace {

using BufferNames = std::array<absl::string_view, kMaxBuiltinBuffers>;
constexpr BufferNames kOut = {"out"};
constexpr BufferNames kInOut = {"in", "out"};
constexpr BufferNames kBinary = {"lhs", "rhs", "out"};
constexpr BufferNames kMatmul = {"a", "b", "out"};
constexpr BufferNames kWhere = {"cond", "x", "y", "out"};
constexpr BufferNames kNormWeight = {"in", "weight", "out"};
constexpr BufferNames kNormAffine = {"in", "weight", "bias", "out"};
constexpr BufferNames kGather = {"table", "indices", "out"};
constexpr BufferNames kAttention = {"q", "k", "v", "out"};

constexpr KernelDef Unary(absl::string_view name, DtypeMask dtypes) {
  return {name, 2,     kInOut, dtypes, ShapeRule::kSame, InType::kDtype, OutType::kDtype,
          0,    false, true,   false};
}
constexpr KernelDef Binary(absl::string_view name, DtypeMask dtypes) {
  return {name, 3,     kBinary, dtypes, ShapeRule::kBroadcast, InType::kDtype, OutType::kDtype,
          0,    false, true,    false};
}
// eq ne lt le gt ge: bool out of any two inputs of one type. In place only when the dtype is one
// byte (the output's element size must equal the input's).
constexpr KernelDef Compare(absl::string_view name) {
  return {name, 3,     kBinary, kAllTypes, ShapeRule::kBroadcast, InType::kDtype, OutType::kBool,
          0,    false, true,    false};
}
// Sum and mean of no elements are defined (0, NaN); max, min and argmax of none are not, so their
// axis must not be empty.
constexpr bool kMayBeEmpty = false;
constexpr bool kNonEmpty = true;
constexpr KernelDef Reduce(absl::string_view name, DtypeMask dtypes, OutType out_type,
                           bool needs_nonempty_axis) {
  return {name,     2, kInOut, dtypes, ShapeRule::kReduce, InType::kDtype,
          out_type, 1, false,  false,  needs_nonempty_axis};
}

// layer_norm and rms_norm over the last axis, one row per buffer count: no affine parameters,
// weight, weight and bias (layer_norm only). They alone take the eps scalar (the last column).
constexpr KernelDef Norm(absl::string_view name, uint32_t num_buffers, BufferNames names) {
  return {name, num_buffers, names, kFloatTypes, ShapeRule::kNorm, InType::kDtype, OutType::kDtype,
          1,    false,       true,  false,       FloatParam::kEps};
}

// Sorted by name. "max" and "min" appear twice: reductions with 2 buffers, elementwise with 3.
// Columns: name, buffers, buffer names, dtypes, shape rule, input types, output type, min rank,
// fill scalar, in place, non-empty axis, float parameter (the norms' eps, the causal kernels'
// scale).
constexpr KernelDef kKernels[] = {
    Unary("abs", kSignedTypes),
    Binary("add", kNumericTypes),
    Reduce("argmax", kNumericTypes, OutType::kI64, kNonEmpty),
    {"cast", 2, kInOut, kAllTypes, ShapeRule::kSame, InType::kDtype, OutType::kOutDtype, 0, false,
     true, false},
    // softmax(scale * q k^T) v over the keys each query sees (k <= q): attention in one launch.
    {"causal_attention", 4, kAttention, kFloatTypes, ShapeRule::kAttention, InType::kDtype,
     OutType::kDtype, 2, false, false, false, FloatParam::kScale},
    // Softmax over the lower triangle of the last two dims, scaled: attention's probabilities.
    {"causal_softmax", 2, kInOut, kFloatTypes, ShapeRule::kSame, InType::kDtype, OutType::kDtype, 2,
     false, true, false, FloatParam::kScale},
    {"copy", 2, kInOut, kAllTypes, ShapeRule::kSame, InType::kDtype, OutType::kDtype, 0, false,
     true, false},
    Binary("div", kNumericTypes),
    Compare("eq"),
    Unary("exp", kFloatTypes),
    {"fill", 1, kOut, kAllTypes, ShapeRule::kAny, InType::kDtype, OutType::kDtype, 0, true, false,
     false},
    {"gather", 3, kGather, kAllTypes, ShapeRule::kGather, InType::kIndexSecond, OutType::kDtype, 0,
     false, false, false},
    Compare("ge"),
    Unary("gelu", kFloatTypes),
    Unary("gelu_tanh", kFloatTypes),
    Compare("gt"),
    Norm("layer_norm", 2, kInOut),
    Norm("layer_norm", 3, kNormWeight),
    Norm("layer_norm", 4, kNormAffine),
    Compare("le"),
    Unary("log", kFloatTypes),
    Compare("lt"),
    {"matmul", 3, kMatmul, kNumericTypes, ShapeRule::kMatmul, InType::kDtype, OutType::kDtype, 2,
     false, false, false},
    Reduce("max", kAllTypes, OutType::kDtype, kNonEmpty),
    Binary("max", kAllTypes),
    Reduce("mean", kFloatTypes, OutType::kDtype, kMayBeEmpty),
    Reduce("min", kAllTypes, OutType::kDtype, kNonEmpty),
    Binary("min", kAllTypes),
    Binary("mul", kNumericTypes),
    Compare("ne"),
    Unary("neg", kSignedTypes),
    Binary("pow", kFloatTypes),
    Unary("relu", kSignedTypes),
    Norm("rms_norm", 2, kInOut),
    Norm("rms_norm", 3, kNormWeight),
    Unary("sigmoid", kFloatTypes),
    Unary("silu", kFloatTypes),
    {"softmax", 2, kInOut, kFloatTypes, ShapeRule::kSame, InType::kDtype, OutType::kDtype, 1, false,
     true, false},
    Unary("sqrt", kFloatTypes),
    Binary("sub", kNumericTypes),
    Reduce("sum", kNumericTypes, OutType::kDtype, kMayBeEmpty),
    Unary("tanh", kFloatTypes),
    {"where", 4, kWhere, kAllTypes, ShapeRule::kBroadcast, InType::kBoolFirst, OutType::kDtype, 0,
     false, true, false},
};

std::string BufferList(const KernelDef& def) {
  std::string s;
  for (uint32_t i = 0; i < def.num_buffers; ++i) {
    absl::StrAppend(&s, i == 0 ? "" : ", ", def.buffer_names[i]);
  }
  return s;
}

}  // namespace

absl::Span<const KernelDef> BuiltinKernelDefs() { return kKernels; }

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

ElemType BufferElemType(const KernelDef& def, const BuiltinCall& call, uint32_t index) {
  if (index + 1 < def.num_buffers) {
    if (def.in_type == InType::kBoolFirst && index == 0) return ElemType::kBool;
    if (def.in_type == InType::kIndexSecond && index == 1) return call.index_dtype;
    return call.dtype;
  }
  switch (def.out_type) {
    case OutType::kDtype:
      return call.dtype;
    case OutType::kOutDtype:
      return call.out_dtype;
    case OutType::kI64:
      return ElemType::kI64;
    case OutType::kBool:
      return ElemType::kBool;
  }
  return call.dtype;
}

BuiltinBuffers BuiltinBufferTypes(const KernelDef& def, const BuiltinCall& call) {
  BuiltinBuffers b;
  b.count = def.num_buffers;
  for (uint32_t i = 0; i < def.num_buffers; ++i) b.types[i] = BufferElemType(def, call, i);
  b.in_place = def.in_place;
  return b;
}

absl::StatusOr<BuiltinBuffers> BuiltinBufferTypes(const BuiltinCall& call, size_t num_buffers) {
  ASSIGN_OR_RETURN(const KernelDef* def, FindKernel(call.name, num_buffers));
  return BuiltinBufferTypes(*def, call);
}

std::vector<std::string> BuiltinMatmulTypes() {
  const KernelDef& def = **FindKernel("matmul", 3);
  std::vector<std::string> out;
  for (ElemType t : kAllElemTypes) {
    if ((def.dtypes & DtypeBit(t)) == 0) continue;
    const absl::string_view acc = IsHalf(t) ? "f32" : ElemTypeName(t);
    out.push_back(absl::StrCat(ElemTypeName(t), "*", ElemTypeName(t), "+", acc));
  }
  return out;
}

std::vector<std::string> BuiltinKernelNames() {
  std::vector<std::string> names;
  for (const KernelDef& def : kKernels) {
    if (names.empty() || names.back() != def.name) names.emplace_back(def.name);
  }
  return names;
}

absl::Status ValidateBuiltin(const BuiltinCall& call, absl::Span<const uint64_t> buffer_bytes) {
  return ValidateBuiltinCall(call, buffer_bytes).status();
}

}  // namespace cubed::kernels
