#pragma once

// The builtin kernels: named kernels every backend implements, checked against their bindings
// before they run. This header is the backend-neutral entry point (the calls, their names and
// their validation); kernels/cpu/cpu_kernels.h runs them on the host and kernels/cuda/
// cuda_kernels.h compiles them for a GPU. docs/kernel-abi.md lists every kernel with its buffers,
// scalars and element types.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/elem_type.h"

namespace cubed::kernels {

// A call's scalars and metadata are held inline for the common calls: a call is decoded on the
// wire's thread and freed there, and these were three allocations and frees per command (P2 on
// the 2-core VM).
using ScalarBytes = absl::InlinedVector<uint8_t, 16>;
using MetadataWords = absl::InlinedVector<uint32_t, 16>;  // CubeCL layout (kernel_metadata.h).

// All scalars of one element type, packed little-endian, ElemSize(elem) bytes each.
struct ScalarGroup {
  ElemType elem = ElemType::kF32;
  ScalarBytes bytes;
};
using ScalarGroups = absl::InlinedVector<ScalarGroup, 1>;

// `words` (EncodeKernelMetadata's) as a call's metadata.
inline MetadataWords ToMetadataWords(absl::Span<const uint32_t> words) {
  return MetadataWords(words.begin(), words.end());
}

// A builtin kernel call, as the service edge decoded it.
struct BuiltinCall {
  std::string name;
  ElemType dtype = ElemType::kF32;
  ElemType out_dtype = ElemType::kF32;    // "cast" only.
  uint32_t axis = 0;                      // Reductions and gather.
  ElemType index_dtype = ElemType::kI64;  // "gather" only: its indices, i32 or i64.
  bool allow_tf32 = false;                // "matmul" of f32 only: TF32 tensor cores allowed.
  MetadataWords metadata;                 // CubeCL layout (common/kernel_metadata.h).
  ScalarGroups scalars;
};

// Most buffers a builtin kernel binds (where: cond, x, y, out).
inline constexpr size_t kMaxBuiltinBuffers = 4;

// What the buffers of one builtin call hold.
struct BuiltinBuffers {
  size_t count = 0;                                  // Buffers, inputs then the output.
  std::array<ElemType, kMaxBuiltinBuffers> types{};  // Element type of each of the `count`.
  // The output may be written onto an input: the same memory, layout and element size.
  bool in_place = false;
};

// The buffers of `call` bound to `num_buffers` buffers: each has the call's dtype, except the
// output of cast (out_dtype), argmax (i64) and the comparisons (bool), where's condition (bool)
// and gather's indices (index_dtype). NOT_FOUND for an unknown kernel, INVALID_ARGUMENT for a wrong
// buffer count (as ValidateBuiltin); checks nothing else.
absl::StatusOr<BuiltinBuffers> BuiltinBufferTypes(const BuiltinCall& call, size_t num_buffers);

// Names of every builtin kernel, sorted.
std::vector<std::string> BuiltinKernelNames();

// The input and accumulator types of builtin "matmul", one "a*b+acc" per input type, e.g.
// "bf16*bf16+f32": f16 and bf16 accumulate in f32 and round once to the input type; the others
// accumulate in their own type (integers wrap). The same on every backend.
std::vector<std::string> BuiltinMatmulTypes();

// Checks a call against its buffers' sizes without running it: known name (NOT_FOUND
// otherwise), supported dtype, buffer count, metadata, shapes (broadcasting rules), scalars, and
// that every tensor's strided extent fits in its buffer (INVALID_ARGUMENT naming which).
// `buffer_bytes` holds the size of each bound buffer.
absl::Status ValidateBuiltin(const BuiltinCall& call, absl::Span<const uint64_t> buffer_bytes);

}  // namespace cubed::kernels
