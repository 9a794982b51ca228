#include "kernels/cpu/host_buffers.h"

#include <array>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/validate.h"

namespace cubed::kernels {

absl::Status CheckHostBuffers(const KernelDef& def, const BuiltinCall& call,
                              const KernelMetadata& meta, absl::Span<const HostBuffer> buffers) {
  std::array<uint64_t, kMaxBuiltinBuffers> span_bytes{};
  for (uint32_t i = 0; i < def.num_buffers; ++i) {
    const uint32_t es = ElemSize(BufferElemType(def, call, i));
    span_bytes[i] = meta.tensors[i].SpanElements() * es;  // Checked by ValidateCall.
    if (span_bytes[i] == 0) continue;
    if (buffers[i].data == nullptr) {
      return absl::InternalError(
          absl::StrCat(ErrorPrefix(def), BufferLabel(def, i), " has no memory"));
    }
    if (reinterpret_cast<uintptr_t>(buffers[i].data) % es != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(ErrorPrefix(def), BufferLabel(def, i), " is not aligned to its ", es,
                       "-byte elements; bind it at an offset that is a multiple of ", es));
    }
  }
  const uint32_t out = def.num_buffers - 1;
  const uintptr_t o = reinterpret_cast<uintptr_t>(buffers[out].data);
  for (uint32_t i = 0; i < out; ++i) {
    const uintptr_t p = reinterpret_cast<uintptr_t>(buffers[i].data);
    if (span_bytes[i] == 0 || span_bytes[out] == 0 || p >= o + span_bytes[out] ||
        o >= p + span_bytes[i]) {
      continue;
    }
    const TensorLayout& a = meta.tensors[i];
    const TensorLayout& b = meta.tensors[out];
    const bool identical =
        def.in_place && p == o && span_bytes[i] == span_bytes[out] &&
        ElemSize(BufferElemType(def, call, i)) == ElemSize(BufferElemType(def, call, out)) &&
        a.rank == b.rank && a.shape == b.shape && a.strides == b.strides;
    if (!identical) {
      return absl::InvalidArgumentError(absl::StrCat(
          ErrorPrefix(def), BufferLabel(def, out), " overlaps ", BufferLabel(def, i),
          " in memory; only elementwise kernels may write in place, and only onto an input "
          "with the same memory and layout"));
    }
  }
  return absl::OkStatus();
}

}  // namespace cubed::kernels
