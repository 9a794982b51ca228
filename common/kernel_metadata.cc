#include "common/kernel_metadata.h"

#include <algorithm>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace cubed {
namespace {

constexpr uint64_t kU32Max = std::numeric_limits<uint32_t>::max();

absl::Status NotU32(absl::string_view what, uint64_t value) {
  return absl::InvalidArgumentError(
      absl::StrCat("metadata: ", what, " = ", value, " does not fit in 32 bits"));
}

}  // namespace

uint64_t TensorLayout::NumElements() const {
  // Saturates at UINT64_MAX so an overflowing shape never compares equal to a real length.
  uint64_t n = 1;
  for (uint32_t i = 0; i < rank; ++i) {
    if (__builtin_mul_overflow(n, shape[i], &n)) return std::numeric_limits<uint64_t>::max();
  }
  return n;
}

uint64_t TensorLayout::SpanElements() const {
  uint64_t span = 1;
  for (uint32_t i = 0; i < rank; ++i) {
    if (shape[i] == 0) return 0;
    uint64_t extent;
    if (__builtin_mul_overflow(shape[i] - 1, strides[i], &extent) ||
        __builtin_add_overflow(span, extent, &span)) {
      return std::numeric_limits<uint64_t>::max();
    }
  }
  return span;
}

bool TensorLayout::IsContiguous() const {
  uint64_t expected = 1;
  for (uint32_t i = rank; i-- > 0;) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

TensorLayout TensorLayout::Contiguous(absl::Span<const uint64_t> shape) {
  TensorLayout t;
  t.rank = static_cast<uint32_t>(shape.size() < kMaxRank ? shape.size() : kMaxRank);
  uint64_t stride = 1;
  for (uint32_t i = t.rank; i-- > 0;) {
    t.shape[i] = shape[i];
    t.strides[i] = stride;
    stride *= shape[i];
  }
  return t;
}

absl::StatusOr<std::vector<uint32_t>> EncodeKernelMetadata(absl::Span<const uint64_t> buffer_len,
                                                           absl::Span<const TensorLayout> tensors) {
  const size_t n = buffer_len.size();
  const size_t t = tensors.size();
  if (t > n) {
    return absl::InvalidArgumentError(
        absl::StrCat("metadata: ", t, " tensors but only ", n, " buffers"));
  }
  std::vector<uint32_t> words(2 * n + 3 * t);
  size_t dynamic = 0;
  for (const TensorLayout& layout : tensors) dynamic += 2 * std::min(layout.rank, kMaxRank);
  words.reserve(words.size() + dynamic);  // One allocation for the whole block.
  for (size_t i = 0; i < n; ++i) {
    if (buffer_len[i] > kU32Max) return NotU32(absl::StrCat("buffer_len[", i, "]"), buffer_len[i]);
    words[i] = static_cast<uint32_t>(buffer_len[i]);
    uint64_t logical = i < t ? tensors[i].NumElements() : buffer_len[i];
    if (logical > kU32Max) return NotU32(absl::StrCat("logical_len[", i, "]"), logical);
    words[n + i] = static_cast<uint32_t>(logical);
  }
  // Shapes first, then strides, as CubeCL appends them.
  for (size_t i = 0; i < t; ++i) {
    if (tensors[i].rank > kMaxRank) {
      return absl::InvalidArgumentError(
          absl::StrCat("metadata: tensor ", i, " has rank ", tensors[i].rank, " > ", kMaxRank));
    }
    words[2 * n + i] = tensors[i].rank;
    words[2 * n + t + i] = static_cast<uint32_t>(words.size());
    for (uint32_t d = 0; d < tensors[i].rank; ++d) {
      if (tensors[i].shape[d] > kU32Max) {
        return NotU32(absl::StrCat("tensor ", i, " shape[", d, "]"), tensors[i].shape[d]);
      }
      words.push_back(static_cast<uint32_t>(tensors[i].shape[d]));
    }
  }
  for (size_t i = 0; i < t; ++i) {
    words[2 * n + 2 * t + i] = static_cast<uint32_t>(words.size());
    for (uint32_t d = 0; d < tensors[i].rank; ++d) {
      if (tensors[i].strides[d] > kU32Max) {
        return NotU32(absl::StrCat("tensor ", i, " strides[", d, "]"), tensors[i].strides[d]);
      }
      words.push_back(static_cast<uint32_t>(tensors[i].strides[d]));
    }
  }
  return words;
}

absl::StatusOr<KernelMetadata> DecodeKernelMetadata(absl::Span<const uint32_t> words,
                                                    uint32_t num_buffers, uint32_t num_tensors) {
  if (num_tensors > num_buffers) {
    return absl::InvalidArgumentError(
        absl::StrCat("metadata: ", num_tensors, " tensors but only ", num_buffers, " buffers"));
  }
  const uint64_t n = num_buffers, t = num_tensors;
  const uint64_t static_len = 2 * n + 3 * t;
  if (words.size() < static_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metadata: ", words.size(), " words, but ", n, " buffers and ", t,
        " tensors need a static part of ", static_len, " words (2 per buffer + 3 per tensor)"));
  }
  KernelMetadata meta;
  meta.buffer_len.assign(words.begin(), words.begin() + n);
  meta.logical_len.assign(words.begin() + n, words.begin() + 2 * n);
  meta.tensors.resize(t);
  for (uint64_t i = 0; i < t; ++i) {
    TensorLayout& layout = meta.tensors[i];
    const uint32_t rank = words[2 * n + i];
    const uint64_t shape_at = words[2 * n + t + i];
    const uint64_t stride_at = words[2 * n + 2 * t + i];
    if (rank > kMaxRank) {
      return absl::InvalidArgumentError(
          absl::StrCat("metadata: tensor ", i, " has rank ", rank, " > ", kMaxRank));
    }
    if (shape_at < static_len || shape_at + rank > words.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("metadata: tensor ", i, " shape_offset ", shape_at, " with rank ", rank,
                       " is outside the dynamic part [", static_len, ", ", words.size(), ")"));
    }
    if (stride_at < static_len || stride_at + rank > words.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("metadata: tensor ", i, " stride_offset ", stride_at, " with rank ", rank,
                       " is outside the dynamic part [", static_len, ", ", words.size(), ")"));
    }
    layout.rank = rank;
    for (uint32_t d = 0; d < rank; ++d) {
      layout.shape[d] = words[shape_at + d];
      layout.strides[d] = words[stride_at + d];
    }
    if (layout.NumElements() != meta.logical_len[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat("metadata: tensor ", i, " logical_len ", meta.logical_len[i],
                       " is not the product of its shape (", layout.NumElements(), ")"));
    }
  }
  return meta;
}

}  // namespace cubed
