// MakeCudaBuiltinArgs and BuiltinLaunchDims: the host side of a builtin CUDA launch.

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/kernel_metadata.h"
#include "common/status_macros.h"
#include "kernels/cuda/builtin_catalog.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/validate.h"

namespace cubed::kernels {
namespace {

static_assert(sizeof(CudaTensorArg) == 152, "CudaTensorArg layout changed: update the .cuh side");
static_assert(sizeof(CudaBuiltinArgs) < 4096, "CudaBuiltinArgs must stay under 4 KiB");
static_assert(CUBED_CUDA_MAX_RANK == kMaxRank, "rank limits differ");

// Note [Reduction strategy]
// One thread per output when the reduced axis is not the contiguous one and there are outputs
// enough for a block: neighbouring threads then read neighbouring elements. Otherwise a warp per
// output for short axes or many outputs, a block per output for few long ones. When the groups of
// outputs cannot fill the device, Note [Split reduction] (builtin_args.h) splits each output's axis
// over blocks: as many as fit in one wave of resident blocks (rounding down: a second, partial
// wave would run alone), each thread still folding kMinSliceFold elements. GPU runs 58-60, 64M
// f32 and 4096 x 16384 f32 against torch: four waves (the resident count taken as 2048 threads an
// SM) 0.70-0.83x for full reductions, 0.81-0.85x along axis 0; two whole waves 0.86-0.91x along
// axis 0; one wave 0.99-1.01x (f32) and 0.97-1.27x (f16, bf16) for full reductions, 0.93-0.96x
// along axis 0.
constexpr uint64_t kThreadPerOutputMin = 256;
constexpr uint64_t kWarpReduceMaxLen = 2048;
// Outputs enough to fill a device with a warp each (2048: 16 warps on each of 128 SMs), so a
// long axis is streamed by one warp per output without block-wide barriers (GPU run 36: rows of
// 16384 f32, a block each 1757 GB/s, a warp each 3494).
constexpr uint64_t kWarpReduceManyOutputs = 2048;
constexpr uint64_t kMinSliceFold = 16;
constexpr uint64_t kMaxSplitPartials = (uint64_t{8} << 20) / CUBED_CUDA_SPLIT_PARTIAL_BYTES;
constexpr uint32_t kBlock = 256;
constexpr uint32_t kLargeBlock = 1024;  // The kernels' __launch_bounds__.
constexpr uint32_t kBlocksPerSm = 32;
// Resident threads of an SM for a kernel of __launch_bounds__(1024): it may take 64 registers
// a thread, and an SM has 65536 (sm_70 and later), so 1024, not the 2048 of smaller kernels
// (GPU run 58: a full reduction's 528 blocks of 1024 ran as four waves at 50% occupancy).
constexpr uint32_t kThreadsPerSm = 1024;

// Softmax and the norms: a warp per row while the row fits in a warp's registers
// (CUBED_CUDA_SOFTMAX_CACHE_BYTES), else a block just large enough to hold it, else (longer rows,
// read more than once) a large block.
uint64_t SoftmaxThreadElems(uint32_t elem_bytes) {
  return CUBED_CUDA_SOFTMAX_CACHE_BYTES / std::max<uint32_t>(elem_bytes, 1);
}

bool SameShape(const TensorLayout& a, const TensorLayout& b) {
  if (a.rank != b.rank) return false;
  for (uint32_t d = 0; d < a.rank; ++d) {
    if (a.shape[d] != b.shape[d]) return false;
  }
  return true;
}

uint64_t CeilDiv(uint64_t a, uint64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

// CUBED_CUDA_SUFFIX: `in` (of out's rank, as validated broadcasting gives) is contiguous and
// holds out's trailing dims after leading dims of size 1, so out's element i reads its element
// i % NumElements(in).
bool IsDenseSuffix(const TensorLayout& in, const TensorLayout& out) {
  if (in.rank != out.rank || !in.IsContiguous()) return false;
  uint32_t d = 0;
  while (d < in.rank && in.shape[d] == 1) ++d;
  for (; d < in.rank; ++d) {
    if (in.shape[d] != out.shape[d]) return false;
  }
  return true;
}

// Note [Gather strategy]: a warp per row (a block for long rows) when the dims after the axis are
// dense in table and out, so that each row reads its index once and copies with 16-byte vectors;
// otherwise a thread per output element, neighbouring threads on neighbouring out elements.
constexpr uint64_t kGatherWarpRowMin = 32;
constexpr uint64_t kGatherBlockRowMin = 2048;

// Whether dims [from, rank) of `t` are dense row-major (size-1 dims have any stride).
bool DenseFrom(const TensorLayout& t, uint32_t from) {
  uint64_t want = 1;
  for (uint32_t d = t.rank; d-- > from;) {
    if (t.shape[d] != 1 && t.strides[d] != want) return false;
    want *= t.shape[d];
  }
  return true;
}

// The MMA path of causal_attention (Note [Attention paths] in attention.cuh): half types, E = Ev
// = 64, and q, k and v with unit column strides and every other stride a multiple of 8 elements,
// so that each row starts 16 bytes after an aligned base (the kernel checks the bases).
constexpr uint64_t kAttentionMmaDim = 64;
bool AttentionOnTensorCores(const BuiltinCall& call, const KernelMetadata& meta) {
  if (call.dtype != ElemType::kF16 && call.dtype != ElemType::kBF16) return false;
  const uint32_t r = meta.tensors[3].rank;
  if (meta.tensors[0].shape[r - 1] != kAttentionMmaDim ||
      meta.tensors[3].shape[r - 1] != kAttentionMmaDim) {
    return false;
  }
  for (uint32_t i = 0; i < 3; ++i) {
    const TensorLayout& t = meta.tensors[i];
    if (t.strides[r - 1] != 1) return false;
    for (uint32_t d = 0; d + 1 < r; ++d) {
      if (t.shape[d] != 1 && t.strides[d] % 8 != 0) return false;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<CudaBuiltinArgs> MakeCudaBuiltinArgs(const BuiltinCall& call,
                                                    absl::Span<const uint64_t> buffer_bytes) {
  ASSIGN_OR_RETURN(const ValidatedCall v, ValidateBuiltinCall(call, buffer_bytes));
  return MakeValidatedCudaBuiltinArgs(call, v.meta, buffer_bytes);
}

absl::StatusOr<CudaBuiltinArgs> MakeValidatedCudaBuiltinArgs(
    const BuiltinCall& call, const KernelMetadata& meta, absl::Span<const uint64_t> buffer_bytes) {
  const size_t n = buffer_bytes.size();
  if (n == 0 || n > CUBED_CUDA_MAX_BUFFERS || meta.tensors.size() != n) {
    return absl::InternalError(absl::StrCat("builtin '", call.name, "' with ", n, " buffers"));
  }
  ASSIGN_OR_RETURN(const CudaFamily family, FindCudaFamily(call.name, n));
  CudaBuiltinArgs args;
  std::memset(&args, 0, sizeof(args));
  args.num_buffers = static_cast<uint32_t>(n);
  for (size_t i = 0; i < n; ++i) {
    const TensorLayout& t = meta.tensors[i];
    CudaTensorArg& b = args.buffers[i];
    b.bytes = buffer_bytes[i];
    b.rank = t.rank;
    for (uint32_t d = 0; d < t.rank; ++d) {
      b.shape[d] = t.shape[d];
      b.strides[d] = t.shape[d] == 1 ? 0 : t.strides[d];
    }
  }
  const TensorLayout& out = meta.tensors[n - 1];
  args.count = out.NumElements();
  switch (family) {
    case CudaFamily::kFill: {
      const ScalarBytes& bytes = call.scalars[0].bytes;
      for (size_t i = 0; i < std::min<size_t>(bytes.size(), 8); ++i) {
        args.scalar |= uint64_t{bytes[i]} << (8 * i);
      }
      [[fallthrough]];
    }
    case CudaFamily::kCopy:
    case CudaFamily::kCast:
    case CudaFamily::kUnary:
    case CudaFamily::kBinary:
    case CudaFamily::kCompare:
    case CudaFamily::kWhere: {
      bool dense = true;
      for (const TensorLayout& t : meta.tensors)
        dense = dense && t.IsContiguous() && SameShape(t, out);
      if (dense) {
        args.flags |= CUBED_CUDA_DENSE;
      } else if ((family == CudaFamily::kBinary || family == CudaFamily::kCompare) &&
                 out.IsContiguous()) {
        bool suffix = true;
        for (size_t i = 0; i + 1 < meta.tensors.size(); ++i)
          suffix = suffix && IsDenseSuffix(meta.tensors[i], out);
        if (suffix) args.flags |= CUBED_CUDA_SUFFIX;
      }
      break;
    }
    case CudaFamily::kReduce: {
      const TensorLayout& in = meta.tensors[0];
      args.axis = call.axis;
      const uint64_t len = in.shape[call.axis];
      if (in.strides[call.axis] != 1 && len > 1 && args.count >= kThreadPerOutputMin) {
        args.variant = CUBED_CUDA_GROUP_THREAD;
      } else {
        args.variant = len <= kWarpReduceMaxLen || args.count >= kWarpReduceManyOutputs
                           ? CUBED_CUDA_GROUP_WARP
                           : CUBED_CUDA_GROUP_BLOCK;
      }
      break;
    }
    case CudaFamily::kNorm:
    case CudaFamily::kSoftmax: {    // Softmax and the norms: a row per group.
      if (!call.scalars.empty()) {  // The norms' eps, causal_softmax's scale (validated).
        const double param = FloatScalar(call);
        std::memcpy(&args.scalar, &param, sizeof(param));
      }
      args.axis = out.rank - 1;
      const uint64_t len = out.shape[out.rank - 1];
      args.count = len == 0 ? 0 : args.count / len;
      args.variant = len <= 32 * SoftmaxThreadElems(ElemSize(call.dtype)) ? CUBED_CUDA_GROUP_WARP
                                                                          : CUBED_CUDA_GROUP_BLOCK;
      break;
    }
    case CudaFamily::kMatmul:
    case CudaFamily::kAttention: {
      uint64_t batches = 1;
      for (uint32_t d = 0; d + 2 < out.rank; ++d) batches *= out.shape[d];
      args.count = batches;
      if (family == CudaFamily::kAttention) {
        const double scale = FloatScalar(call);
        std::memcpy(&args.scalar, &scale, sizeof(scale));
        args.variant = AttentionOnTensorCores(call, meta) ? CUBED_CUDA_ATTENTION_MMA
                                                          : CUBED_CUDA_ATTENTION_GENERIC;
      }
      break;
    }
    case CudaFamily::kGather: {  // Note [Gather strategy].
      const TensorLayout& table = meta.tensors[0];
      args.axis = call.axis;
      uint64_t inner = 1;
      for (uint32_t d = call.axis + 1; d < table.rank; ++d) inner *= table.shape[d];
      const bool rows = inner >= kGatherWarpRowMin && DenseFrom(table, call.axis + 1) &&
                        DenseFrom(out, call.axis + meta.tensors[1].rank);
      args.variant = !rows                         ? CUBED_CUDA_GROUP_THREAD
                     : inner >= kGatherBlockRowMin ? CUBED_CUDA_GROUP_BLOCK
                                                   : CUBED_CUDA_GROUP_WARP;
      if (rows) args.count /= inner;
      break;
    }
  }
  return args;
}

CudaLaunchDims BuiltinLaunchDims(const BuiltinCall& call, CudaBuiltinArgs* args,
                                 uint32_t sm_count) {
  CudaLaunchDims dims;
  dims.block[0] = kBlock;
  sm_count = std::max<uint32_t>(sm_count, 1);
  const uint64_t max_grid = uint64_t{sm_count} * kBlocksPerSm;
  absl::StatusOr<CudaFamily> family = FindCudaFamily(call.name, args->num_buffers);
  if (!family.ok()) return dims;
  uint64_t blocks = 1;
  switch (*family) {
    case CudaFamily::kFill:
    case CudaFamily::kCopy:
    case CudaFamily::kCast:
    case CudaFamily::kUnary:
    case CudaFamily::kBinary:
    case CudaFamily::kCompare:
    case CudaFamily::kWhere: {
      // Elements a thread takes a step on the dense path (where: always 4). A cast's output may
      // be wider than its input; a comparison's (bool) never is.
      const uint64_t wider = std::max<uint64_t>(
          ElemSize(call.dtype), *family == CudaFamily::kCast ? ElemSize(call.out_dtype) : 0);
      const uint64_t pack = *family == CudaFamily::kWhere ? 4 : CUBED_CUDA_DENSE_PACK(wider);
      const uint64_t items =
          (args->flags & CUBED_CUDA_DENSE) != 0 ? CeilDiv(args->count, pack) : args->count;
      blocks = CeilDiv(items, kBlock);
      break;
    }
    case CudaFamily::kReduce: {
      const uint64_t len = args->buffers[0].shape[args->axis % CUBED_CUDA_MAX_RANK];
      const bool block = args->variant == CUBED_CUDA_GROUP_BLOCK;
      // A block per output: as many threads as fold kMinSliceFold elements each, up to 1024,
      // so that few long outputs still fill the device and short ones waste no barriers.
      if (block) {
        dims.block[0] = static_cast<uint32_t>(std::clamp<uint64_t>(
            CeilDiv(CeilDiv(len, kMinSliceFold), 32) * 32, kBlock / 2, kLargeBlock));
      }
      const uint64_t group_threads = block                                    ? dims.block[0]
                                     : args->variant == CUBED_CUDA_GROUP_WARP ? 32
                                                                              : 1;
      const uint64_t groups = CeilDiv(args->count, dims.block[0] / group_threads);
      // At most one wave of resident blocks (Note [Reduction strategy]).
      const uint64_t wanted = uint64_t{sm_count} * (kThreadsPerSm / dims.block[0]);
      uint64_t splits = 1;
      if (groups < wanted && groups <= CUBED_CUDA_SPLIT_GROUPS && args->count > 0) {
        splits = std::min<uint64_t>({wanted / groups, len / (group_threads * kMinSliceFold),
                                     kMaxSplitPartials / args->count});
      }
      args->splits = 0;
      if (splits > 1) {
        args->splits = static_cast<uint32_t>(splits);
        dims.workspace_bytes = CUBED_CUDA_SPLIT_PARTIALS_OFFSET +
                               args->count * splits * CUBED_CUDA_SPLIT_PARTIAL_BYTES;
      }
      blocks = groups * std::max<uint64_t>(splits, 1);
      break;
    }
    case CudaFamily::kSoftmax:
    case CudaFamily::kNorm: {
      const CudaTensorArg& out = args->buffers[(args->num_buffers - 1) % CUBED_CUDA_MAX_BUFFERS];
      const uint64_t len = out.shape[args->axis % CUBED_CUDA_MAX_RANK];
      if (args->variant == CUBED_CUDA_GROUP_WARP) {
        blocks = CeilDiv(args->count, kBlock / 32);
      } else {
        const uint64_t threads = CeilDiv(len, SoftmaxThreadElems(ElemSize(call.dtype)));
        dims.block[0] =
            static_cast<uint32_t>(std::clamp<uint64_t>(CeilDiv(threads, 32) * 32, 64, kLargeBlock));
        blocks = args->count;
      }
      break;
    }
    case CudaFamily::kGather:
      blocks = args->variant == CUBED_CUDA_GROUP_THREAD ? CeilDiv(args->count, kBlock)
               : args->variant == CUBED_CUDA_GROUP_WARP ? CeilDiv(args->count, kBlock / 32)
                                                        : args->count;
      break;
    case CudaFamily::kAttention: {  // A block per 128 queries, or a warp per query.
      // Both paths in blocks of the MMA path's size (the kernel's __launch_bounds__).
      dims.block[0] = CUBED_CUDA_ATTENTION_MMA_THREADS;
      const CudaTensorArg& out = args->buffers[3];
      if (out.rank >= 2 && out.rank <= CUBED_CUDA_MAX_RANK && out.shape[out.rank - 1] != 0) {
        const uint64_t queries = out.shape[out.rank - 2];  // count * queries < 2^32 elements.
        blocks = args->variant == CUBED_CUDA_ATTENTION_MMA
                     ? args->count * CeilDiv(queries, CUBED_CUDA_ATTENTION_MMA_ROWS)
                     : CeilDiv(args->count * queries, CUBED_CUDA_ATTENTION_MMA_THREADS / 32);
      }
      break;
    }
    case CudaFamily::kMatmul: {
      const CudaTensorArg& c = args->buffers[2];
      if (c.rank >= 2 && c.rank <= CUBED_CUDA_MAX_RANK) {
        blocks = args->count * CeilDiv(c.shape[c.rank - 2], 64) * CeilDiv(c.shape[c.rank - 1], 64);
      }
      break;
    }
  }
  dims.grid[0] = static_cast<uint32_t>(std::clamp<uint64_t>(blocks, 1, max_grid));
  return dims;
}

}  // namespace cubed::kernels
