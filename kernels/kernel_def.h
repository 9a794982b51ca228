#pragma once

// How one builtin kernel is specified in the catalogue (builtin_registry.cc): its buffers,
// element types, shape rule and the other rules validation checks. Backend-neutral: each backend
// lists its own implementation of every row (kernels/cpu/cpu_registry.cc,
// kernels/cuda/builtin_catalog.cc). For the kernel libraries, not for their callers
// (kernels/builtin.h is the entry point).

#include <array>
#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/elem_type.h"
#include "kernels/builtin.h"

namespace cubed::kernels {

// A set of element types, one bit per ElemType value.
using DtypeMask = uint32_t;
constexpr DtypeMask DtypeBit(ElemType t) { return DtypeMask{1} << static_cast<uint32_t>(t); }
inline constexpr DtypeMask kHalfTypes = DtypeBit(ElemType::kF16) | DtypeBit(ElemType::kBF16);
inline constexpr DtypeMask kFloatTypes =
    DtypeBit(ElemType::kF32) | DtypeBit(ElemType::kF64) | kHalfTypes;
inline constexpr DtypeMask kSignedTypes = kFloatTypes | DtypeBit(ElemType::kI32) |
                                          DtypeBit(ElemType::kI64) | DtypeBit(ElemType::kI8) |
                                          DtypeBit(ElemType::kI16);
// Every type with arithmetic: all but bool.
inline constexpr DtypeMask kNumericTypes =
    kSignedTypes | DtypeBit(ElemType::kU32) | DtypeBit(ElemType::kU8) | DtypeBit(ElemType::kU16);
// Bool adds only what is defined on truth values: fill, copy, cast, max/min (or/and, any/all).
inline constexpr DtypeMask kAllTypes = kNumericTypes | DtypeBit(ElemType::kBool);

// How the output's shape relates to the inputs' (docs/kernel-abi.md).
enum class ShapeRule : uint8_t {
  kAny,        // fill: the single output, any shape.
  kSame,       // copy, cast, unary, softmax: out shape == in shape.
  kBroadcast,  // binary, where: equal ranks; each input dim equals out's or is 1.
  kReduce,     // out = in with shape[axis] == 1.
  kMatmul,     // [..., M, K] x [..., K, N] -> [..., M, N], batch dims broadcast.
  kNorm,       // layer_norm, rms_norm: out shape == in shape; weight, bias: [in's last dim].
  kGather,     // table, indices (of the call's index_dtype) -> out = table.shape[:axis] +
               // indices.shape + table.shape[axis + 1:].
  kAttention,  // q [..., L, E], k [..., S, E], v [..., S, Ev] -> out [..., L, Ev], batch dims
               // broadcast.
};

// Element type of the output (the last buffer): the call's dtype, its out_dtype (cast), i64
// (argmax) or bool (the comparisons).
enum class OutType : uint8_t { kDtype, kOutDtype, kI64, kBool };

// Element type of the inputs: the call's dtype, or bool for the first input and the dtype for
// the others (where's condition), or the call's index_dtype for the second (gather's indices).
enum class InType : uint8_t { kDtype, kBoolFirst, kIndexSecond };

// The one float parameter a kernel takes as its only scalar group: exactly one f32 or f64 value,
// whatever the dtype (the kernels convert it to the type they compute in; FloatScalar reads it).
enum class FloatParam : uint8_t {
  kNone,
  kEps,    // Norms: finite and >= 0 (the row's variance + eps is never negative).
  kScale,  // causal_softmax, causal_attention: the factor of the scores, finite.
};

// One row of the catalogue: a builtin kernel is its name and buffer count.
struct KernelDef {
  absl::string_view name;
  uint32_t num_buffers;                                            // At most kMaxBuiltinBuffers.
  std::array<absl::string_view, kMaxBuiltinBuffers> buffer_names;  // Inputs then the output.
  DtypeMask dtypes;                                                // Of the call's dtype.
  ShapeRule shape_rule;
  InType in_type;
  OutType out_type;
  uint32_t min_rank;         // Of every tensor: 1 for reductions and softmax, 2 for matmul.
  bool takes_fill_scalar;    // Exactly one scalar group of the dtype, holding one value.
  bool in_place;             // The output may be an input's memory, with an identical layout.
  bool needs_nonempty_axis;  // Reductions of no identity (max, min, argmax): the axis may be
                             // empty only when the output is.
  FloatParam float_param = FloatParam::kNone;
};

// Every row of the catalogue, sorted by name, a name's rows by buffer count ("max" and "min" are
// reductions with 2 buffers and elementwise with 3). Static; never changes.
absl::Span<const KernelDef> BuiltinKernelDefs();

// The row of builtin `name` taking `num_buffers` buffers, a row of BuiltinKernelDefs(). NOT_FOUND
// for an unknown name, INVALID_ARGUMENT naming the expected buffers for a wrong count.
absl::StatusOr<const KernelDef*> FindKernel(absl::string_view name, size_t num_buffers);

// Element type of buffer `index` of a call to `def`.
ElemType BufferElemType(const KernelDef& def, const BuiltinCall& call, uint32_t index);

// BuiltinBufferTypes (builtin.h) of a call to `def`, its kernel as found already (a validated
// call's: no catalogue search).
BuiltinBuffers BuiltinBufferTypes(const KernelDef& def, const BuiltinCall& call);

}  // namespace cubed::kernels
