#include "kernels/cpu/gather.h"

#include <array>
#include <cstring>

#include "kernels/cpu/parallel_for.h"
#include "kernels/cpu/strided_loop.h"

namespace cubed::kernels {
namespace {

// Note [Gather rows]: out is walked as rows x inner, a row being one index of the indices and one
// position in the dims before the axis (out dims [0, axis + r), r = indices rank) and the inner
// part the dims after the axis (out dims [axis + r, rank), which are table dims (axis, rank)).
// Each row reads its index once and copies (or zeroes) its inner part. ParallelFor splits the
// linear out elements, so that many short rows (a last-axis gather) and a few long ones (an
// embedding of a short prompt) both spread over every thread.

// Table dims (axis, rank) and out dims [axis + r, rank): strides of the inner part.
struct Inner {
  StridedLoop<2> loop;
  uint64_t size;
};

Inner MakeInner(const TensorLayout& table, const TensorLayout& out, uint32_t axis, uint32_t r) {
  TensorLayout shape;
  std::array<std::array<uint64_t, kMaxRank>, 2> strides{};
  shape.rank = table.rank - axis - 1;
  for (uint32_t d = 0; d < shape.rank; ++d) {
    shape.shape[d] = table.shape[axis + 1 + d];
    strides[0][d] = table.strides[axis + 1 + d];
    strides[1][d] = out.strides[axis + r + d];
  }
  StridedLoop<2> loop(shape, strides);
  const uint64_t size = loop.size();
  return {loop, size};
}

// Out dims [0, axis + r): offsets in table (dims before the axis), indices and out.
StridedLoop<3> MakeRows(const TensorLayout& table, const TensorLayout& indices,
                        const TensorLayout& out, uint32_t axis) {
  TensorLayout shape;
  std::array<std::array<uint64_t, kMaxRank>, 3> strides{};
  shape.rank = axis + indices.rank;
  for (uint32_t d = 0; d < shape.rank; ++d) {
    shape.shape[d] = out.shape[d];
    strides[0][d] = d < axis ? table.strides[d] : 0;
    strides[1][d] = d < axis ? 0 : indices.strides[d - axis];
    strides[2][d] = out.strides[d];
  }
  return StridedLoop<3>(shape, strides);
}

// T: an unsigned type of the element size (gather moves bits); I: int32_t or int64_t.
template <typename T, typename I>
void GatherLoop(const KernelArgs& args) {
  const TensorLayout& table = args.meta.tensors[0];
  const TensorLayout& indices = args.meta.tensors[1];
  const TensorLayout& out = args.meta.tensors[2];
  const uint32_t axis = args.call.axis;
  const int64_t n = static_cast<int64_t>(table.shape[axis]);  // < 2^32.
  const uint64_t axis_stride = table.strides[axis];
  const StridedLoop<3> rows = MakeRows(table, indices, out, axis);
  const Inner inner = MakeInner(table, out, axis, indices.rank);
  const T* x = BufferAs<const T>(args, 0);
  const I* ix = BufferAs<const I>(args, 1);
  T* y = BufferAs<T>(args, 2);
  const uint64_t total = rows.size() * inner.size;  // out's elements, < 2^32.
  if (total == 0) return;
  ParallelFor(total, kElementwiseGrain, [&](uint64_t begin, uint64_t end) {
    const uint64_t first_row = begin / inner.size, end_row = (end - 1) / inner.size + 1;
    uint64_t row = first_row;
    rows.ForRuns(first_row, end_row, [&](const auto& off, uint64_t count, const auto& step) {
      for (uint64_t c = 0; c < count; ++c, ++row) {
        int64_t k = static_cast<int64_t>(ix[off[1] + c * step[1]]);
        if (k < 0) k += n;
        const bool valid = k >= 0 && k < n;
        // Formed only for a valid index: an empty axis may leave `x` null.
        const T* xs =
            valid ? x + off[0] + c * step[0] + static_cast<uint64_t>(k) * axis_stride : nullptr;
        T* ys = y + off[2] + c * step[2];
        if (inner.size == 1) {
          *ys = valid ? *xs : T{0};
          continue;
        }
        const uint64_t from = row == first_row ? begin - row * inner.size : 0;
        const uint64_t to = row + 1 == end_row ? end - row * inner.size : inner.size;
        inner.loop.ForRuns(from, to, [&](const auto& o, uint64_t len, const auto& s) {
          T* yr = ys + o[1];
          if (!valid) {
            if (s[1] == 1) {
              std::memset(yr, 0, len * sizeof(T));
            } else {
              for (uint64_t i = 0; i < len; ++i) yr[i * s[1]] = T{0};
            }
            return;
          }
          const T* xr = xs + o[0];
          if (s[0] == 1 && s[1] == 1) {
            std::memcpy(yr, xr, len * sizeof(T));
          } else {
            for (uint64_t i = 0; i < len; ++i) yr[i * s[1]] = xr[i * s[0]];
          }
        });
      }
    });
  });
}

template <typename T>
void GatherByIndexType(const KernelArgs& args) {
  if (args.call.index_dtype == ElemType::kI32) {
    GatherLoop<T, int32_t>(args);
  } else {
    GatherLoop<T, int64_t>(args);
  }
}

}  // namespace

absl::Status RunGather(const KernelArgs& args) {
  switch (ElemSize(args.call.dtype)) {
    case 1:
      GatherByIndexType<uint8_t>(args);
      break;
    case 2:
      GatherByIndexType<uint16_t>(args);
      break;
    case 4:
      GatherByIndexType<uint32_t>(args);
      break;
    default:
      GatherByIndexType<uint64_t>(args);
      break;
  }
  return absl::OkStatus();
}

}  // namespace cubed::kernels
