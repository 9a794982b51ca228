#pragma once

// Copy plans for host<->device transfers of (possibly strided) tensors, as pieces that
// cuMemcpy2DAsync moves in one call each. Pure functions: no driver calls, tested without a GPU.
//
// Note [Tensor copies]: a tensor's dims are first simplified (dims of size 1 dropped, dims that
// are contiguous with the next merged). The innermost dim then gives the rows: with stride 1 a
// row is the whole innermost dim (width = shape * elem_size) and the next dim gives the rows'
// pitch; with another stride a "row" is one element and the innermost dim gives the pitch. Every
// index of the remaining outer dims is one more 2D copy. Pieces are cut so that each fits one
// staging buffer. Layouts a 2D copy cannot express (a pitch below the width, as with stride 0;
// a pitch above the device's maximum) or that would need too many copies get no plan: the
// caller then moves the tensor's whole byte span and packs it on the host (PackTensorOnHost).

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/types/span.h"

namespace cubed {

// `height` rows of `width` bytes. On the strided side (the device for tensors) row r starts at
// strided_offset + r * pitch; on the dense side (the caller's packed bytes) the rows follow each
// other from dense_offset.
struct CopyPiece {
  uint64_t strided_offset = 0;
  uint64_t pitch = 0;
  uint64_t width = 0;
  uint64_t height = 0;
  uint64_t dense_offset = 0;

  uint64_t bytes() const { return width * height; }
};

struct CopyPlanLimits {
  uint64_t max_piece_bytes = uint64_t{16} << 20;  // One staging buffer.
  uint64_t max_pitch = uint64_t{1} << 31;         // CU_DEVICE_ATTRIBUTE_MAX_PITCH.
  uint64_t max_pieces = 4096;                     // More: let the host pack instead.
};

// Pieces that move every element of the tensor (shape and strides in elements, already checked
// to fit its binding) between its strided layout and the dense row-major packing, in dense order.
// Empty for a tensor with no elements; nullopt when the layout needs the host fallback.
std::optional<std::vector<CopyPiece>> PlanTensorCopy(absl::Span<const uint64_t> shape,
                                                     absl::Span<const uint64_t> strides,
                                                     uint64_t elem_size,
                                                     const CopyPlanLimits& limits);

// Pieces for `size` contiguous bytes (a plain buffer), each at most max_piece_bytes.
std::vector<CopyPiece> PlanContiguousCopy(uint64_t size, uint64_t max_piece_bytes);

// Pieces that write the dense row-major bytes [dense_offset, dense_offset + size) of a tensor
// laid out densely or in pitched rows (Note [Pitched tensors]) to their places (a bulk upload's
// chunk, Note [Bulk transfers] in server/service/stream/bulk_transfers.h). Each piece's
// dense_offset is relative to dense_offset (the chunk's first byte); at most three pieces (a
// partial first row, whole rows, a partial last row). nullopt for any other layout.
std::optional<std::vector<CopyPiece>> PlanDenseRangeWrite(absl::Span<const uint64_t> shape,
                                                          absl::Span<const uint64_t> strides,
                                                          uint64_t elem_size, uint64_t dense_offset,
                                                          uint64_t size);

// Copies bytes [from, from + n) of the concatenation of `pieces` to `out` (a bulk upload's chunk
// as gRPC received it, into one staging buffer). The range must lie inside the pieces.
void GatherCopy(absl::Span<const absl::Span<const uint8_t>> pieces, uint64_t from, uint64_t n,
                uint8_t* out);

// Bytes from the tensor's first element to one past its last: (1 + sum((shape-1)*stride)) *
// elem_size, 0 for a tensor with no elements. Callers have checked it against the binding.
uint64_t TensorSpanBytes(absl::Span<const uint64_t> shape, absl::Span<const uint64_t> strides,
                         uint64_t elem_size);

// Packs the strided tensor at `base` densely into `out` (row-major), on the host.
void PackTensorOnHost(const uint8_t* base, absl::Span<const uint64_t> shape,
                      absl::Span<const uint64_t> strides, uint64_t elem_size, uint8_t* out);

// Note [Pitched tensors]: CreateTensor / EmptyTensor on CUDA pad each row (the innermost dim) so
// that every row starts on a `pitch_alignment` (256-byte) boundary, the way cuMemAllocPitch
// would: pitch = round_up(shape[rank-1] * elem_size, 256). strides[rank-1] = 1,
// strides[rank-2] = pitch / elem_size, and each outer stride is the next inner stride times the
// next inner dim; the allocation holds rows * pitch bytes (rows = product of all but the last
// dim). The tensor stays contiguous (dense strides, rows * width bytes) when rank < 2, when the
// pitch is not a multiple of elem_size, or when the padding would be more than a quarter of the
// row (pitch - width > width / 4), which keeps narrow rows from growing up to 256 times.
struct TensorAllocation {
  std::vector<uint64_t> strides;  // Elements.
  uint64_t bytes = 0;
};
// nullopt when the size overflows 64 bits.
std::optional<TensorAllocation> PitchedTensorLayout(absl::Span<const uint64_t> shape,
                                                    uint64_t elem_size, uint64_t pitch_alignment);

}  // namespace cubed
