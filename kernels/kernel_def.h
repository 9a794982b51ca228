#pragma once

// How one builtin kernel is described in the registry table (builtin_registry.cc): its buffers,
// element types, shape rule and CPU implementation. Internal to the kernels library.

#include <array>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/elem_type.h"
#include "common/kernel_metadata.h"
#include "kernels/builtin.h"

namespace cubed::kernels {

// A set of element types, one bit per ElemType value.
using DtypeMask = uint32_t;
constexpr DtypeMask DtypeBit(ElemType t) { return DtypeMask{1} << static_cast<uint32_t>(t); }
inline constexpr DtypeMask kFloatTypes = DtypeBit(ElemType::kF32) | DtypeBit(ElemType::kF64);
inline constexpr DtypeMask kSignedTypes =
    kFloatTypes | DtypeBit(ElemType::kI32) | DtypeBit(ElemType::kI64);
inline constexpr DtypeMask kAllTypes = kSignedTypes | DtypeBit(ElemType::kU32);

// How the output's shape relates to the inputs' (docs/kernel-abi.md).
enum class ShapeRule : uint8_t {
  kAny,        // fill: the single output, any shape.
  kSame,       // copy, cast, unary, softmax: out shape == in shape.
  kBroadcast,  // binary: equal ranks; each input dim equals out's or is 1.
  kReduce,     // out = in with shape[axis] == 1.
  kMatmul,     // [..., M, K] x [..., K, N] -> [..., M, N], batch dims broadcast.
};

// Element type of the output (the last buffer); inputs always have the call's dtype.
enum class OutType : uint8_t { kDtype, kOutDtype, kI64 };

// Everything a CPU implementation gets once the call validated. `op` is the table entry's
// family-specific operation (e.g. a UnaryOp value).
struct KernelArgs {
  const BuiltinCall& call;
  const KernelMetadata& meta;
  absl::Span<const HostBuffer> buffers;
  int op;
};

// One row of the registry table.
struct KernelDef {
  absl::string_view name;
  uint32_t num_buffers;
  std::array<absl::string_view, 3> buffer_names;  // Inputs then the output.
  DtypeMask dtypes;
  ShapeRule shape_rule;
  OutType out_type;
  uint32_t min_rank;         // Of every tensor: 1 for reductions and softmax, 2 for matmul.
  bool takes_fill_scalar;    // Exactly one scalar group of the dtype, holding one value.
  bool in_place;             // The output may be an input's memory, with an identical layout.
  bool needs_nonempty_axis;  // Reductions of no identity (max, min, argmax): the axis may be
                             // empty only when the output is.
  int op;
  absl::Status (*run)(const KernelArgs& args);
};

// Element type of buffer `index` of a call to `def`.
ElemType BufferElemType(const KernelDef& def, const BuiltinCall& call, uint32_t index);

// Typed view of buffer `index`; the data pointer is aligned for T (checked before running).
template <typename T>
T* BufferAs(const KernelArgs& args, uint32_t index) {
  return reinterpret_cast<T*>(args.buffers[index].data);
}

}  // namespace cubed::kernels
