#include "kernels/validate.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checked_math.h"
#include "common/status_macros.h"

namespace cubed::kernels {
namespace {

std::string Describe(const TensorLayout& t) {
  return absl::StrCat("shape ", FormatDims(t, t.shape), ", strides ", FormatDims(t, t.strides));
}

// The one float parameter of the norms (eps) and the causal kernels (scale): one f32 or f64 value,
// whatever the dtype (the kernels convert it to the type they compute in).
absl::Status CheckFloatParam(const KernelDef& def, const BuiltinCall& call) {
  const absl::string_view what = def.float_param == FloatParam::kEps ? "eps" : "scale";
  if (call.scalars.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(ErrorPrefix(def), "takes exactly one scalar group (", what,
                     ", one f32 or f64 value), got ", call.scalars.size()));
  }
  const ScalarGroup& g = call.scalars[0];
  if (g.elem != ElemType::kF32 && g.elem != ElemType::kF64) {
    return absl::InvalidArgumentError(absl::StrCat(ErrorPrefix(def), "the ", what,
                                                   " scalar group is ", ElemTypeName(g.elem),
                                                   "; it must be f32 or f64"));
  }
  if (g.bytes.size() != ElemSize(g.elem)) {
    return absl::InvalidArgumentError(
        absl::StrCat(ErrorPrefix(def), "the ", what, " scalar group holds ", g.bytes.size(),
                     " bytes, expected exactly one ", ElemTypeName(g.elem), " value (",
                     ElemSize(g.elem), " bytes)"));
  }
  const double value = FloatScalar(call);
  if (def.float_param == FloatParam::kEps && (!(value >= 0) || !std::isfinite(value))) {
    return absl::InvalidArgumentError(
        absl::StrCat(ErrorPrefix(def), "eps is ", value, "; it must be finite and >= 0"));
  }
  if (!std::isfinite(value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(ErrorPrefix(def), "scale is ", value, "; it must be finite"));
  }
  return absl::OkStatus();
}

absl::Status CheckScalars(const KernelDef& def, const BuiltinCall& call) {
  if (def.float_param != FloatParam::kNone) return CheckFloatParam(def, call);
  if (!def.takes_fill_scalar) {
    if (call.scalars.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("kernel '", def.name, "' takes no scalars, got ",
                                                   call.scalars.size(), " scalar group(s)"));
  }
  const absl::string_view dtype = ElemTypeName(call.dtype);
  if (call.scalars.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("kernel '", def.name,
                                                   "' takes exactly one scalar group (the ", dtype,
                                                   " value to write), got ", call.scalars.size()));
  }
  const ScalarGroup& g = call.scalars[0];
  if (g.elem != call.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(ErrorPrefix(def), "the scalar group is ",
                                                   ElemTypeName(g.elem), " but the dtype is ",
                                                   dtype));
  }
  if (g.bytes.size() != ElemSize(call.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        ErrorPrefix(def), "the scalar group holds ", g.bytes.size(),
        " bytes, expected exactly one ", dtype, " value (", ElemSize(call.dtype), " bytes)"));
  }
  return absl::OkStatus();
}

absl::Status CheckFits(const KernelDef& def, const KernelMetadata& meta, uint32_t i, ElemType type,
                       uint64_t bytes) {
  const TensorLayout& t = meta.tensors[i];
  const uint32_t es = ElemSize(type);
  const uint64_t span = t.SpanElements();
  const std::optional<uint64_t> need = CheckedMul(span, es);
  if (!need || *need > bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        ErrorPrefix(def), BufferLabel(def, i), " holds ", bytes, " bytes, but its layout (",
        Describe(t), ") spans ", span, " ", ElemTypeName(type), " elements = ",
        need ? absl::StrCat(*need, " bytes") : std::string("more than 2^64 bytes")));
  }
  const uint64_t declared = uint64_t{meta.buffer_len[i]} * es;  // u32 * 8 cannot overflow.
  if (declared > bytes) {
    return absl::InvalidArgumentError(absl::StrCat(ErrorPrefix(def), BufferLabel(def, i), " holds ",
                                                   bytes, " bytes, but metadata buffer_len is ",
                                                   meta.buffer_len[i], " ", ElemTypeName(type),
                                                   " elements = ", declared, " bytes"));
  }
  return absl::OkStatus();
}

// Each dim of `in` (dims [0, count)) equals `out`'s or is 1.
absl::Status CheckBroadcast(const KernelDef& def, uint32_t in_index, const TensorLayout& in,
                            const TensorLayout& out, uint32_t count) {
  for (uint32_t d = 0; d < count; ++d) {
    if (in.shape[d] != out.shape[d] && in.shape[d] != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(ErrorPrefix(def), def.buffer_names[in_index], " shape ",
                       FormatDims(in, in.shape), " does not broadcast to ",
                       def.buffer_names[def.num_buffers - 1], " shape ", FormatDims(out, out.shape),
                       ": dim ", d, " is ", in.shape[d], ", must be ", out.shape[d], " or 1"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckSameRank(const KernelDef& def, const KernelMetadata& meta) {
  const uint32_t out = def.num_buffers - 1;
  for (uint32_t i = 0; i < out; ++i) {
    if (meta.tensors[i].rank != meta.tensors[out].rank) {
      return absl::InvalidArgumentError(absl::StrCat(
          ErrorPrefix(def), def.buffer_names[i], " has rank ", meta.tensors[i].rank, " but ",
          def.buffer_names[out], " has rank ", meta.tensors[out].rank, "; ranks must be equal",
          def.shape_rule == ShapeRule::kBroadcast ? " (broadcast with size-1 dims)" : ""));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckReduce(const KernelDef& def, const BuiltinCall& call, const TensorLayout& in,
                         const TensorLayout& out) {
  if (call.axis >= in.rank) {
    return absl::InvalidArgumentError(absl::StrCat(ErrorPrefix(def), "axis ", call.axis,
                                                   " is out of range for in of rank ", in.rank));
  }
  for (uint32_t d = 0; d < in.rank; ++d) {
    const uint64_t want = d == call.axis ? 1 : in.shape[d];
    if (out.shape[d] != want) {
      return absl::InvalidArgumentError(absl::StrCat(
          ErrorPrefix(def), "out shape ", FormatDims(out, out.shape), " does not match in shape ",
          FormatDims(in, in.shape), " reduced along axis ", call.axis, ": out dim ", d, " is ",
          out.shape[d], ", must be ", want));
    }
  }
  if (def.needs_nonempty_axis && in.shape[call.axis] == 0 && out.NumElements() > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(ErrorPrefix(def), "cannot reduce axis ", call.axis, " of size 0 (in shape ",
                     FormatDims(in, in.shape), "): ", def.name, " of no elements is undefined"));
  }
  return absl::OkStatus();
}

absl::Status CheckMatmul(const KernelDef& def, const TensorLayout& a, const TensorLayout& b,
                         const TensorLayout& c) {
  const uint32_t r = c.rank;
  const uint64_t m = a.shape[r - 2], k = a.shape[r - 1], k2 = b.shape[r - 2], n = b.shape[r - 1];
  if (k != k2) {
    return absl::InvalidArgumentError(
        absl::StrCat(ErrorPrefix(def), "a shape ", FormatDims(a, a.shape), " and b shape ",
                     FormatDims(b, b.shape), " do not chain: a dim ", r - 1, " (K = ", k,
                     ") must equal b dim ", r - 2, " (", k2, ")"));
  }
  if (c.shape[r - 2] != m || c.shape[r - 1] != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        ErrorPrefix(def), "out shape ", FormatDims(c, c.shape), " must end in [M, N] = [", m, ", ",
        n, "] for a shape ", FormatDims(a, a.shape), " and b shape ", FormatDims(b, b.shape)));
  }
  RETURN_IF_ERROR(CheckBroadcast(def, 0, a, c, r - 2));
  return CheckBroadcast(def, 1, b, c, r - 2);
}

// q [..., L, E], k [..., S, E], v [..., S, Ev] -> out [..., L, Ev] (ranks already equal), the
// batch dims of q, k and v broadcast to out's.
absl::Status CheckAttention(const KernelDef& def, const KernelMetadata& meta) {
  const TensorLayout& q = meta.tensors[0];
  const TensorLayout& k = meta.tensors[1];
  const TensorLayout& v = meta.tensors[2];
  const TensorLayout& out = meta.tensors[3];
  const uint32_t r = out.rank;
  const uint64_t l = q.shape[r - 2], e = q.shape[r - 1], s = k.shape[r - 2], ev = v.shape[r - 1];
  if (k.shape[r - 1] != e) {
    return absl::InvalidArgumentError(
        absl::StrCat(ErrorPrefix(def), "q shape ", FormatDims(q, q.shape), " and k shape ",
                     FormatDims(k, k.shape),
                     " differ in their last dim (E): queries and keys must have the "
                     "same length"));
  }
  if (v.shape[r - 2] != s) {
    return absl::InvalidArgumentError(absl::StrCat(
        ErrorPrefix(def), "k shape ", FormatDims(k, k.shape), " and v shape ",
        FormatDims(v, v.shape), " differ in dim ", r - 2, " (S): every key needs one value"));
  }
  if (out.shape[r - 2] != l || out.shape[r - 1] != ev) {
    return absl::InvalidArgumentError(
        absl::StrCat(ErrorPrefix(def), "out shape ", FormatDims(out, out.shape),
                     " must end in [L, Ev] = [", l, ", ", ev, "] for q shape ",
                     FormatDims(q, q.shape), " and v shape ", FormatDims(v, v.shape)));
  }
  for (uint32_t i = 0; i < 3; ++i)
    RETURN_IF_ERROR(CheckBroadcast(def, i, meta.tensors[i], out, r - 2));
  return absl::OkStatus();
}

// out = table.shape[:axis] + indices.shape + table.shape[axis + 1:], table rank >= 1.
absl::Status CheckGather(const KernelDef& def, const BuiltinCall& call, const TensorLayout& table,
                         const TensorLayout& indices, const TensorLayout& out) {
  if (call.axis >= table.rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        ErrorPrefix(def), "axis ", call.axis, " is out of range for table of rank ", table.rank));
  }
  TensorLayout want;  // Only rank and shape.
  want.rank = table.rank - 1 + indices.rank;
  if (want.rank > kMaxRank) {
    return absl::InvalidArgumentError(
        absl::StrCat(ErrorPrefix(def), "table rank ", table.rank, " and indices rank ",
                     indices.rank, " give out rank ", want.rank, ", more than ", kMaxRank));
  }
  for (uint32_t d = 0; d < want.rank; ++d) {
    want.shape[d] = d < call.axis                  ? table.shape[d]
                    : d < call.axis + indices.rank ? indices.shape[d - call.axis]
                                                   : table.shape[d - indices.rank + 1];
  }
  bool same = out.rank == want.rank;
  for (uint32_t d = 0; same && d < want.rank; ++d) same = out.shape[d] == want.shape[d];
  if (same) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      ErrorPrefix(def), "out shape ", FormatDims(out, out.shape), " must be table.shape[:axis] + ",
      "indices.shape + table.shape[axis + 1:] = ", FormatDims(want, want.shape), " (table ",
      FormatDims(table, table.shape), ", indices ", FormatDims(indices, indices.shape), ", axis ",
      call.axis, ")"));
}

// Gather's indices are i32 or i64 (the call's index_dtype).
absl::Status CheckIndexDtype(const KernelDef& def, const BuiltinCall& call) {
  if (call.index_dtype == ElemType::kI32 || call.index_dtype == ElemType::kI64) {
    return absl::OkStatus();
  }
  const std::string name = ElemSize(call.index_dtype) == 0
                               ? absl::StrCat("unknown type ", static_cast<int>(call.index_dtype))
                               : std::string(ElemTypeName(call.index_dtype));
  return absl::InvalidArgumentError(absl::StrCat(ErrorPrefix(def), "index_dtype ", name,
                                                 " is not an index type (indices are i32 or i64)"));
}

// Elements of `type` that a buffer of `bytes` holds.
uint64_t HeldElements(uint64_t bytes, ElemType type) { return bytes / ElemSize(type); }

// Work bound of a reduction (docs/kernel-abi.md, "Work bound"): the kernel reads every logical
// element of `in`, so `in` may claim no more elements than max(its buffer's, out's).
absl::Status CheckReduceWork(const KernelDef& def, const BuiltinCall& call,
                             const KernelMetadata& meta, absl::Span<const uint64_t> buffer_bytes) {
  const TensorLayout& in = meta.tensors[0];
  const uint64_t claimed = in.NumElements();  // < 2^32: equals the u32 logical_len.
  const uint64_t held = HeldElements(buffer_bytes[0], call.dtype);
  const uint64_t out = meta.tensors[1].NumElements();
  if (claimed <= std::max(held, out)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      ErrorPrefix(def), BufferLabel(def, 0), " (", Describe(in), ") claims ", claimed,
      " elements, but its buffer holds ", held, " ", ElemTypeName(call.dtype), " elements and ",
      def.buffer_names[1], " has ", out,
      "; a reduction's input may claim at most max(buffer "
      "elements, out elements), so stride 0 or overlapping strides may not repeat its data "
      "(reduce the tensor before broadcasting it; docs/kernel-abi.md, \"Work bound\")"));
}

// Elements of a matmul operand, counting each batch dim (all but the last two) of stride 0 as
// size 1: a broadcast batch dim repeats no work that the output does not pay for.
uint64_t UnbroadcastElements(const TensorLayout& t) {
  if (t.NumElements() == 0) return 0;  // Else every dim >= 1 and the product stays < 2^32.
  uint64_t n = 1;
  for (uint32_t d = 0; d < t.rank; ++d) {
    if (d + 2 < t.rank && t.strides[d] == 0) continue;
    n *= t.shape[d];
  }
  return n;
}

// Work bound of matmul (docs/kernel-abi.md, "Work bound"): out.NumElements() * K multiply-adds.
// Every batch dim of out > 1 comes from an operand with that extent and a nonzero stride, and an
// operand whose inner dim K exceeds the other output dim (a: K > N, b: K > M) claims no more
// elements (stride-0 batch dims counted once) than its buffer holds.
absl::Status CheckMatmulWork(const KernelDef& def, const BuiltinCall& call,
                             const KernelMetadata& meta, absl::Span<const uint64_t> buffer_bytes) {
  const TensorLayout& a = meta.tensors[0];
  const TensorLayout& b = meta.tensors[1];
  const TensorLayout& c = meta.tensors[2];
  if (c.NumElements() == 0) return absl::OkStatus();  // No multiply-adds at all.
  const uint32_t r = c.rank;
  for (uint32_t d = 0; d + 2 < r; ++d) {
    if (c.shape[d] <= 1) continue;
    const bool from_a = a.shape[d] == c.shape[d] && a.strides[d] != 0;
    const bool from_b = b.shape[d] == c.shape[d] && b.strides[d] != 0;
    if (from_a || from_b) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        ErrorPrefix(def), "out batch dim ", d, " is ", c.shape[d], ", but neither a (", Describe(a),
        ") nor b (", Describe(b),
        ") has that extent there with a nonzero stride (a stride-0 dim "
        "broadcasts like a dim of 1): out's batch dims must be the broadcast of a's and b's "
        "(docs/kernel-abi.md, \"Work bound\")"));
  }
  const uint64_t m = c.shape[r - 2], n = c.shape[r - 1], k = a.shape[r - 1];
  for (uint32_t i = 0; i < 2; ++i) {
    const uint64_t other = i == 0 ? n : m;  // a's K is bounded by N, b's by M.
    if (k <= other) continue;
    const TensorLayout& t = meta.tensors[i];
    const uint64_t claimed = UnbroadcastElements(t);
    const uint64_t held = HeldElements(buffer_bytes[i], call.dtype);
    if (claimed <= held) continue;
    return absl::InvalidArgumentError(
        absl::StrCat(ErrorPrefix(def), BufferLabel(def, i), " (", Describe(t), ") claims ", claimed,
                     " elements (stride-0 batch dims counted once), but its buffer holds ", held,
                     " ", ElemTypeName(call.dtype), " elements; with K = ", k, " > ",
                     i == 0 ? "N = " : "M = ", other, ", ", def.buffer_names[i],
                     " may not repeat its data through stride 0 or "
                     "overlapping strides (docs/kernel-abi.md, \"Work bound\")"));
  }
  return absl::OkStatus();
}

// Work bound of causal_attention (docs/kernel-abi.md, "Work bound"): each output row costs
// S * (E + Ev) multiply-adds, so every batch dim of out > 1 comes from an input with that extent
// and a nonzero stride, and k and v claim no more elements (stride-0 batch dims counted once) than
// their buffers hold: the work is bounded by out's rows times the memory k and v bind.
absl::Status CheckAttentionWork(const KernelDef& def, const BuiltinCall& call,
                                const KernelMetadata& meta,
                                absl::Span<const uint64_t> buffer_bytes) {
  const TensorLayout& out = meta.tensors[3];
  if (out.NumElements() == 0) return absl::OkStatus();
  for (uint32_t d = 0; d + 2 < out.rank; ++d) {
    if (out.shape[d] <= 1) continue;
    bool from_input = false;
    for (uint32_t i = 0; i < 3; ++i) {
      const TensorLayout& t = meta.tensors[i];
      from_input = from_input || (t.shape[d] == out.shape[d] && t.strides[d] != 0);
    }
    if (from_input) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        ErrorPrefix(def), "out batch dim ", d, " is ", out.shape[d],
        ", but none of q, k and v has that extent there with a nonzero stride (a stride-0 dim "
        "broadcasts like a dim of 1): out's batch dims must be the broadcast of the inputs' "
        "(docs/kernel-abi.md, \"Work bound\")"));
  }
  for (uint32_t i = 1; i < 3; ++i) {
    const TensorLayout& t = meta.tensors[i];
    const uint64_t claimed = UnbroadcastElements(t);
    const uint64_t held = HeldElements(buffer_bytes[i], call.dtype);
    if (claimed <= held) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        ErrorPrefix(def), BufferLabel(def, i), " (", Describe(t), ") claims ", claimed,
        " elements (stride-0 batch dims counted once), but its buffer holds ", held, " ",
        ElemTypeName(call.dtype), " elements; every query reads all of ", def.buffer_names[i],
        ", so it may not repeat its data through stride 0 or overlapping strides "
        "(docs/kernel-abi.md, \"Work bound\")"));
  }
  return absl::OkStatus();
}

// Bounds the work of the kernels that do more than a constant per output element (reductions,
// matmul and attention) by the memory the launch binds; the others (gather reads one index and
// one table element per output element) are bounded by their output, which may not overlap
// itself.
absl::Status CheckWork(const KernelDef& def, const BuiltinCall& call, const KernelMetadata& meta,
                       absl::Span<const uint64_t> buffer_bytes) {
  switch (def.shape_rule) {
    case ShapeRule::kReduce:
      return CheckReduceWork(def, call, meta, buffer_bytes);
    case ShapeRule::kMatmul:
      return CheckMatmulWork(def, call, meta, buffer_bytes);
    case ShapeRule::kAttention:
      return CheckAttentionWork(def, call, meta, buffer_bytes);
    case ShapeRule::kAny:
    case ShapeRule::kSame:
    case ShapeRule::kBroadcast:
    case ShapeRule::kNorm:  // A few passes over each row: a constant per output element.
    case ShapeRule::kGather:
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

// `out` has the rank and shape of `in` (both of equal rank already).
absl::Status CheckSameShape(const KernelDef& def, const TensorLayout& in, const TensorLayout& out) {
  for (uint32_t d = 0; d < in.rank; ++d) {
    if (in.shape[d] != out.shape[d]) {
      return absl::InvalidArgumentError(
          absl::StrCat(ErrorPrefix(def), "out shape ", FormatDims(out, out.shape),
                       " differs from in shape ", FormatDims(in, in.shape), " at dim ", d));
    }
  }
  return absl::OkStatus();
}

// layer_norm, rms_norm: out = in, and weight and bias are 1-D of in's last dim.
absl::Status CheckNorm(const KernelDef& def, const KernelMetadata& meta) {
  const uint32_t out = def.num_buffers - 1;
  const TensorLayout& in = meta.tensors[0];
  if (in.rank != meta.tensors[out].rank) {
    return absl::InvalidArgumentError(absl::StrCat(ErrorPrefix(def), "in has rank ", in.rank,
                                                   " but out has rank ", meta.tensors[out].rank,
                                                   "; ranks must be equal"));
  }
  RETURN_IF_ERROR(CheckSameShape(def, in, meta.tensors[out]));
  const uint64_t len = in.shape[in.rank - 1];
  for (uint32_t i = 1; i < out; ++i) {
    const TensorLayout& p = meta.tensors[i];
    if (p.rank != 1 || p.shape[0] != len) {
      return absl::InvalidArgumentError(absl::StrCat(
          ErrorPrefix(def), def.buffer_names[i], " shape ", FormatDims(p, p.shape), " must be [",
          len, "]: 1-D, the length of in's last dim (in shape ", FormatDims(in, in.shape), ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckShapes(const KernelDef& def, const BuiltinCall& call,
                         const KernelMetadata& meta) {
  const auto& t = meta.tensors;
  switch (def.shape_rule) {
    case ShapeRule::kAny:
      return absl::OkStatus();
    case ShapeRule::kSame:
      RETURN_IF_ERROR(CheckSameRank(def, meta));
      return CheckSameShape(def, t[0], t[1]);
    case ShapeRule::kNorm:
      return CheckNorm(def, meta);
    case ShapeRule::kBroadcast: {
      RETURN_IF_ERROR(CheckSameRank(def, meta));
      const uint32_t out = def.num_buffers - 1;
      for (uint32_t i = 0; i < out; ++i) {
        RETURN_IF_ERROR(CheckBroadcast(def, i, t[i], t[out], t[out].rank));
      }
      return absl::OkStatus();
    }
    case ShapeRule::kReduce:
      RETURN_IF_ERROR(CheckSameRank(def, meta));
      return CheckReduce(def, call, t[0], t[1]);
    case ShapeRule::kMatmul:
      RETURN_IF_ERROR(CheckSameRank(def, meta));
      return CheckMatmul(def, t[0], t[1], t[2]);
    case ShapeRule::kGather:
      return CheckGather(def, call, t[0], t[1], t[2]);
    case ShapeRule::kAttention:
      RETURN_IF_ERROR(CheckSameRank(def, meta));
      return CheckAttention(def, meta);
  }
  return absl::InternalError(absl::StrCat(ErrorPrefix(def), "unknown shape rule"));
}

}  // namespace

std::string ErrorPrefix(const KernelDef& def) { return absl::StrCat("kernel '", def.name, "': "); }

std::string BufferLabel(const KernelDef& def, uint32_t i) {
  return absl::StrCat("buffer ", i, " (", def.buffer_names[i], ")");
}

std::string FormatDims(const TensorLayout& t, const std::array<uint64_t, kMaxRank>& dims) {
  return absl::StrCat("[", absl::StrJoin(dims.begin(), dims.begin() + t.rank, ", "), "]");
}

double FloatScalar(const BuiltinCall& call) {
  const ScalarGroup& g = call.scalars[0];
  if (g.elem == ElemType::kF32 && g.bytes.size() == 4) {
    float f;
    std::memcpy(&f, g.bytes.data(), 4);
    return f;
  }
  double d = 0;
  if (g.bytes.size() == 8) std::memcpy(&d, g.bytes.data(), 8);
  return d;
}

bool MayOverlapItself(const TensorLayout& t) {
  std::array<uint32_t, kMaxRank> order;
  uint32_t n = 0;
  for (uint32_t d = 0; d < t.rank; ++d) {
    if (t.shape[d] == 0) return false;  // No elements at all.
    if (t.shape[d] > 1) order[n++] = d;
  }
  for (uint32_t i = 1; i < n; ++i) {  // Insertion sort by stride (at most kMaxRank dims).
    for (uint32_t j = i; j > 0 && t.strides[order[j]] < t.strides[order[j - 1]]; --j) {
      std::swap(order[j], order[j - 1]);
    }
  }
  uint64_t span = 1;  // Elements spanned by the dims visited so far.
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t d = order[i];
    if (t.strides[d] < span) return true;
    // Bounded by SpanElements(), which fits in a checked buffer.
    span += (t.shape[d] - 1) * t.strides[d];
  }
  return false;
}

absl::StatusOr<KernelMetadata> ValidateCall(const KernelDef& def, const BuiltinCall& call,
                                            absl::Span<const uint64_t> buffer_bytes) {
  if (ElemSize(call.dtype) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(ErrorPrefix(def), "unknown dtype ", static_cast<int>(call.dtype)));
  }
  if (def.out_type == OutType::kOutDtype && ElemSize(call.out_dtype) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(ErrorPrefix(def), "unknown out_dtype ", static_cast<int>(call.out_dtype)));
  }
  if ((def.dtypes & DtypeBit(call.dtype)) == 0) {
    std::vector<absl::string_view> names;
    for (ElemType t : kAllElemTypes) {
      if ((def.dtypes & DtypeBit(t)) != 0) names.push_back(ElemTypeName(t));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("kernel '", def.name, "' does not support dtype ", ElemTypeName(call.dtype),
                     " (supported: ", absl::StrJoin(names, ", "), ")"));
  }
  if (def.shape_rule == ShapeRule::kGather) RETURN_IF_ERROR(CheckIndexDtype(def, call));
  if (call.allow_tf32 && (def.shape_rule != ShapeRule::kMatmul || call.dtype != ElemType::kF32)) {
    return absl::InvalidArgumentError(
        absl::StrCat(ErrorPrefix(def), "allow_tf32 applies to matmul of f32 only, not to ",
                     def.name, " of ", ElemTypeName(call.dtype)));
  }
  RETURN_IF_ERROR(CheckScalars(def, call));
  absl::StatusOr<KernelMetadata> meta =
      DecodeKernelMetadata(call.metadata, def.num_buffers, def.num_buffers);
  if (!meta.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(ErrorPrefix(def), meta.status().message()));
  }
  for (uint32_t i = 0; i < def.num_buffers; ++i) {
    RETURN_IF_ERROR(CheckFits(def, *meta, i, BufferElemType(def, call, i), buffer_bytes[i]));
  }
  for (uint32_t i = 0; i < def.num_buffers; ++i) {
    if (meta->tensors[i].rank < def.min_rank) {
      return absl::InvalidArgumentError(absl::StrCat(ErrorPrefix(def), def.buffer_names[i],
                                                     " has rank ", meta->tensors[i].rank,
                                                     ", needs rank >= ", def.min_rank));
    }
  }
  const uint32_t out = def.num_buffers - 1;
  if (MayOverlapItself(meta->tensors[out])) {
    return absl::InvalidArgumentError(absl::StrCat(
        ErrorPrefix(def), BufferLabel(def, out), " layout (", Describe(meta->tensors[out]),
        ") addresses some elements more than once; an output needs non-overlapping strides"));
  }
  RETURN_IF_ERROR(CheckShapes(def, call, *meta));
  RETURN_IF_ERROR(CheckWork(def, call, *meta, buffer_bytes));
  return meta;
}

absl::StatusOr<ValidatedCall> ValidateBuiltinCall(const BuiltinCall& call,
                                                  absl::Span<const uint64_t> buffer_bytes) {
  ASSIGN_OR_RETURN(const KernelDef* def, FindKernel(call.name, buffer_bytes.size()));
  ASSIGN_OR_RETURN(KernelMetadata meta, ValidateCall(*def, call, buffer_bytes));
  return ValidatedCall{def, std::move(meta)};
}

}  // namespace cubed::kernels
