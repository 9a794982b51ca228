#pragma once

// The u32 metadata block of a kernel launch, laid out as CubeCL lays it out
// (cubecl-core codegen/metadata.rs), encoded by clients and decoded by the daemon:
//
//   [buffer_len x N][logical_len x N][rank x T][shape_offset x T][stride_offset x T]   static part
//   [shape of tensor 0 ... shape of tensor T-1][strides of tensor 0 ... of tensor T-1] dynamic part
//
// N = buffers, T = tensors (the first T buffers). buffer_len is the buffer's length in elements,
// logical_len the product of the tensor's shape (for plain buffers: buffer_len). Offsets are
// absolute word indices into the block. Strides are in elements. See docs/kernel-abi.md.

#include <array>
#include <cstdint>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace cubed {

inline constexpr uint32_t kMaxRank = 8;

// Shape and strides (elements) of one tensor argument.
struct TensorLayout {
  uint32_t rank = 0;
  std::array<uint64_t, kMaxRank> shape{};
  std::array<uint64_t, kMaxRank> strides{};

  // Product of the shape (1 for rank 0); UINT64_MAX when it overflows.
  uint64_t NumElements() const;
  // Elements from the first to one past the last addressed element: 1 + sum((shape-1)*stride),
  // 0 when any extent is 0; UINT64_MAX when it overflows.
  uint64_t SpanElements() const;
  // True when strides are the dense row-major strides of the shape.
  bool IsContiguous() const;
  // Dense row-major layout of `shape` (rank <= kMaxRank).
  static TensorLayout Contiguous(absl::Span<const uint64_t> shape);
};

// The decoded metadata of one launch. Inline for up to four buffers: decoding a launch's block
// allocates nothing (it runs on the device loop for every launch).
struct KernelMetadata {
  absl::InlinedVector<uint32_t, 4> buffer_len;   // Elements, one per buffer.
  absl::InlinedVector<uint32_t, 4> logical_len;  // Elements, one per buffer.
  absl::InlinedVector<TensorLayout, 4> tensors;  // One per tensor (the first T buffers).
};

// Encodes the block for `buffer_len.size()` buffers of which the first `tensors.size()` are
// tensors. INVALID_ARGUMENT when a value does not fit in u32 or a rank exceeds kMaxRank.
absl::StatusOr<std::vector<uint32_t>> EncodeKernelMetadata(absl::Span<const uint64_t> buffer_len,
                                                           absl::Span<const TensorLayout> tensors);

// Decodes a block for `num_buffers` buffers and `num_tensors` tensors, checking every count and
// offset against the block's length. INVALID_ARGUMENT naming the bad word otherwise.
absl::StatusOr<KernelMetadata> DecodeKernelMetadata(absl::Span<const uint32_t> words,
                                                    uint32_t num_buffers, uint32_t num_tensors);

}  // namespace cubed
