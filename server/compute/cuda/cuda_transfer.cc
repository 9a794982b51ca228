#include "server/compute/cuda/cuda_transfer.h"

#include <algorithm>
#include <cstring>

#include "common/checked_math.h"

namespace cubed {
namespace {

struct Dim {
  uint64_t size;
  uint64_t stride;  // Elements.
};

// Drops dims of size 1 and merges each dim into the next when they are contiguous.
std::vector<Dim> Simplify(absl::Span<const uint64_t> shape, absl::Span<const uint64_t> strides) {
  std::vector<Dim> dims;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    dims.push_back({shape[d], strides[d]});
  }
  std::vector<Dim> merged;
  for (const Dim& dim : dims) {
    if (!merged.empty() && merged.back().stride == dim.size * dim.stride) {
      merged.back().size *= dim.size;  // Fits: the product is part of the checked span.
      merged.back().stride = dim.stride;
    } else {
      merged.push_back(dim);
    }
  }
  return merged;
}

// Appends the pieces of one 2D block: `height` rows of `width` bytes, `pitch` apart.
void AppendBlock(uint64_t strided, uint64_t pitch, uint64_t width, uint64_t height, uint64_t* dense,
                 uint64_t max_bytes, std::vector<CopyPiece>* pieces) {
  if (width > max_bytes) {  // Rows wider than a piece: each row in several 1-row pieces.
    for (uint64_t r = 0; r < height; ++r) {
      for (uint64_t x = 0; x < width; x += max_bytes) {
        const uint64_t w = std::min(max_bytes, width - x);
        pieces->push_back({strided + r * pitch + x, w, w, 1, *dense});
        *dense += w;
      }
    }
    return;
  }
  const uint64_t rows_per_piece = max_bytes / width;
  for (uint64_t r = 0; r < height; r += rows_per_piece) {
    const uint64_t h = std::min(rows_per_piece, height - r);
    pieces->push_back({strided + r * pitch, h == 1 ? width : pitch, width, h, *dense});
    *dense += width * h;
  }
}

}  // namespace

uint64_t TensorSpanBytes(absl::Span<const uint64_t> shape, absl::Span<const uint64_t> strides,
                         uint64_t elem_size) {
  uint64_t span = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return 0;
    span += (shape[d] - 1) * strides[d];
  }
  return span * elem_size;
}

void GatherCopy(absl::Span<const absl::Span<const uint8_t>> pieces, uint64_t from, uint64_t n,
                uint8_t* out) {
  for (absl::Span<const uint8_t> piece : pieces) {
    if (n == 0) return;
    if (from >= piece.size()) {
      from -= piece.size();
      continue;
    }
    const uint64_t k = std::min<uint64_t>(n, piece.size() - from);
    std::memcpy(out, piece.data() + from, k);
    out += k;
    n -= k;
    from = 0;
  }
}

std::vector<CopyPiece> PlanContiguousCopy(uint64_t size, uint64_t max_piece_bytes) {
  std::vector<CopyPiece> pieces;
  uint64_t dense = 0;
  if (size > 0) AppendBlock(0, size, size, 1, &dense, max_piece_bytes, &pieces);
  return pieces;
}

std::optional<std::vector<CopyPiece>> PlanTensorCopy(absl::Span<const uint64_t> shape,
                                                     absl::Span<const uint64_t> strides,
                                                     uint64_t elem_size,
                                                     const CopyPlanLimits& limits) {
  std::vector<CopyPiece> pieces;
  for (uint64_t s : shape) {
    if (s == 0) return pieces;
  }
  std::vector<Dim> dims = Simplify(shape, strides);
  uint64_t width = elem_size, height = 1, pitch = elem_size;
  size_t outer = dims.size();  // Dims [0, outer) are looped over.
  if (!dims.empty() && dims.back().stride == 1) {
    width = dims.back().size * elem_size;
    pitch = width;
    --outer;
    if (outer > 0) {
      height = dims[outer - 1].size;
      pitch = dims[outer - 1].stride * elem_size;
      --outer;
    }
  } else if (!dims.empty()) {
    height = dims.back().size;
    pitch = dims.back().stride * elem_size;
    --outer;
  }
  if (height > 1 && (pitch < width || pitch > limits.max_pitch)) return std::nullopt;
  uint64_t copies = 1;
  for (size_t d = 0; d < outer; ++d) copies *= dims[d].size;  // Bounded by the element count.
  const uint64_t per_block =
      width > limits.max_piece_bytes
          ? height * ((width + limits.max_piece_bytes - 1) / limits.max_piece_bytes)
          : (height + limits.max_piece_bytes / width - 1) / (limits.max_piece_bytes / width);
  const std::optional<uint64_t> total = CheckedMul(copies, per_block);
  if (!total || *total > limits.max_pieces) return std::nullopt;

  std::vector<uint64_t> index(outer, 0);
  uint64_t dense = 0;
  for (uint64_t c = 0; c < copies; ++c) {
    uint64_t offset = 0;
    for (size_t d = 0; d < outer; ++d) offset += index[d] * dims[d].stride;
    AppendBlock(offset * elem_size, pitch, width, height, &dense, limits.max_piece_bytes, &pieces);
    for (size_t d = outer; d-- > 0;) {  // Odometer over the outer dims.
      if (++index[d] < dims[d].size) break;
      index[d] = 0;
    }
  }
  return pieces;
}

void PackTensorOnHost(const uint8_t* base, absl::Span<const uint64_t> shape,
                      absl::Span<const uint64_t> strides, uint64_t elem_size, uint8_t* out) {
  for (uint64_t s : shape) {
    if (s == 0) return;
  }
  std::vector<Dim> dims = Simplify(shape, strides);
  if (dims.empty()) {
    std::memcpy(out, base, elem_size);
    return;
  }
  const Dim inner = dims.back();
  dims.pop_back();
  std::vector<uint64_t> index(dims.size(), 0);
  for (;;) {
    uint64_t offset = 0;
    for (size_t d = 0; d < dims.size(); ++d) offset += index[d] * dims[d].stride;
    const uint8_t* src = base + offset * elem_size;
    if (inner.stride == 1) {
      std::memcpy(out, src, inner.size * elem_size);
      out += inner.size * elem_size;
    } else {
      for (uint64_t i = 0; i < inner.size; ++i, out += elem_size) {
        std::memcpy(out, src + i * inner.stride * elem_size, elem_size);
      }
    }
    size_t d = dims.size();
    while (d > 0 && ++index[d - 1] == dims[d - 1].size) index[--d] = 0;
    if (d == 0) return;
  }
}

std::optional<TensorAllocation> PitchedTensorLayout(absl::Span<const uint64_t> shape,
                                                    uint64_t elem_size, uint64_t pitch_alignment) {
  TensorAllocation a;
  a.strides.assign(shape.size(), 1);
  const std::optional<uint64_t> count = CheckedProduct(shape);
  const std::optional<uint64_t> dense = count ? CheckedMul(*count, elem_size) : std::nullopt;
  if (!dense) return std::nullopt;
  uint64_t pitch_elems = 0;  // 0: contiguous.
  if (shape.size() >= 2 && *dense > 0) {
    const uint64_t width = shape.back() * elem_size;  // <= dense: no overflow.
    const std::optional<uint64_t> pitch = CheckedRoundUp(width, pitch_alignment);
    if (pitch && *pitch != width && *pitch % elem_size == 0 && *pitch - width <= width / 4) {
      pitch_elems = *pitch / elem_size;
    }
  }
  if (pitch_elems == 0) {
    uint64_t stride = 1;
    for (size_t d = shape.size(); d-- > 0;) {
      a.strides[d] = stride;
      stride *= shape[d];
    }
    a.bytes = *dense;
    return a;
  }
  const size_t rank = shape.size();
  a.strides[rank - 1] = 1;
  a.strides[rank - 2] = pitch_elems;
  for (size_t d = rank - 2; d-- > 0;) {
    const std::optional<uint64_t> s = CheckedMul(a.strides[d + 1], shape[d + 1]);
    if (!s) return std::nullopt;
    a.strides[d] = *s;
  }
  const std::optional<uint64_t> rows = CheckedProduct(shape.first(rank - 1));
  const std::optional<uint64_t> bytes =
      rows ? CheckedMul(*rows, pitch_elems * elem_size) : std::nullopt;
  if (!bytes) return std::nullopt;
  a.bytes = *bytes;
  return a;
}

std::optional<std::vector<CopyPiece>> PlanDenseRangeWrite(absl::Span<const uint64_t> shape,
                                                          absl::Span<const uint64_t> strides,
                                                          uint64_t elem_size, uint64_t dense_offset,
                                                          uint64_t size) {
  std::vector<CopyPiece> pieces;
  if (size == 0) return pieces;
  const size_t rank = shape.size();
  bool dense = true;
  uint64_t stride = 1;
  for (size_t i = rank; i-- > 0;) {
    if (strides[i] != stride && shape[i] != 1) dense = false;
    stride *= shape[i];
  }
  if (dense) {
    pieces.push_back(CopyPiece{dense_offset, size, size, 1, 0});
    return pieces;
  }
  // Pitched rows: the innermost dim is contiguous, rows are `pitch` apart, outer dims follow.
  if (rank < 2 || strides[rank - 1] != 1) return std::nullopt;
  for (size_t i = 0; i + 2 < rank; ++i) {
    if (strides[i] != strides[i + 1] * shape[i + 1]) return std::nullopt;
  }
  const uint64_t width = shape[rank - 1] * elem_size;
  const uint64_t pitch = strides[rank - 2] * elem_size;
  if (width == 0 || pitch < width) return std::nullopt;
  uint64_t at = dense_offset;
  const uint64_t end = dense_offset + size;
  if (at % width != 0) {  // A partial first row.
    const uint64_t n = std::min(end - at, width - at % width);
    pieces.push_back(CopyPiece{(at / width) * pitch + at % width, n, n, 1, at - dense_offset});
    at += n;
  }
  if (const uint64_t rows = (end - at) / width; rows > 0) {
    pieces.push_back(CopyPiece{(at / width) * pitch, pitch, width, rows, at - dense_offset});
    at += rows * width;
  }
  if (at < end) {  // A partial last row.
    pieces.push_back(CopyPiece{(at / width) * pitch, end - at, end - at, 1, at - dense_offset});
  }
  return pieces;
}

}  // namespace cubed
