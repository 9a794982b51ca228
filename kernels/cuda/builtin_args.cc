// MakeCudaBuiltinArgs and BuiltinLaunchDims: the host side of a builtin CUDA launch.

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/kernel_metadata.h"
#include "common/status_macros.h"
#include "kernels/cuda/builtin_catalog.h"
#include "kernels/cuda/cuda_kernels.h"

namespace cubed::kernels {
namespace {

static_assert(sizeof(CudaTensorArg) == 152, "CudaTensorArg layout changed: update the .cuh side");
static_assert(sizeof(CudaBuiltinArgs) < 4096, "CudaBuiltinArgs must stay under 4 KiB");
static_assert(CUBED_CUDA_MAX_RANK == kMaxRank, "rank limits differ");

// Note [Reduction strategy]
// One thread per output when the reduced axis is not the contiguous one and there are enough
// outputs to fill the device: neighbouring threads then read neighbouring elements. Otherwise a
// warp per output for short axes, a block per output for long ones.
constexpr uint64_t kThreadPerOutputMin = 16384;
constexpr uint64_t kWarpReduceMaxLen = 2048;
constexpr uint64_t kWarpSoftmaxMaxLen = 1024;
constexpr uint32_t kBlock = 256;
constexpr uint32_t kLargeBlock = 1024;  // The kernels' __launch_bounds__.
constexpr uint32_t kBlocksPerSm = 32;

bool SameShape(const TensorLayout& a, const TensorLayout& b) {
  if (a.rank != b.rank) return false;
  for (uint32_t d = 0; d < a.rank; ++d) {
    if (a.shape[d] != b.shape[d]) return false;
  }
  return true;
}

uint64_t CeilDiv(uint64_t a, uint64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

}  // namespace

absl::StatusOr<CudaBuiltinArgs> MakeCudaBuiltinArgs(const BuiltinCall& call,
                                                    absl::Span<const uint64_t> buffer_bytes) {
  RETURN_IF_ERROR(ValidateBuiltin(call, buffer_bytes));
  const size_t n = buffer_bytes.size();
  if (n == 0 || n > CUBED_CUDA_MAX_BUFFERS) {
    return absl::InternalError(absl::StrCat("builtin '", call.name, "' with ", n, " buffers"));
  }
  ASSIGN_OR_RETURN(const CudaFamily family, FindCudaFamily(call.name, n));
  ASSIGN_OR_RETURN(
      const KernelMetadata meta,
      DecodeKernelMetadata(call.metadata, static_cast<uint32_t>(n), static_cast<uint32_t>(n)));
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
      const std::vector<uint8_t>& bytes = call.scalars[0].bytes;
      for (size_t i = 0; i < std::min<size_t>(bytes.size(), 8); ++i) {
        args.scalar |= uint64_t{bytes[i]} << (8 * i);
      }
      [[fallthrough]];
    }
    case CudaFamily::kCopy:
    case CudaFamily::kCast:
    case CudaFamily::kUnary:
    case CudaFamily::kBinary: {
      bool dense = true;
      for (const TensorLayout& t : meta.tensors)
        dense = dense && t.IsContiguous() && SameShape(t, out);
      if (dense) args.flags |= CUBED_CUDA_DENSE;
      break;
    }
    case CudaFamily::kReduce: {
      const TensorLayout& in = meta.tensors[0];
      args.axis = call.axis;
      const uint64_t len = in.shape[call.axis];
      if (in.strides[call.axis] != 1 && len > 1 && args.count >= kThreadPerOutputMin) {
        args.variant = CUBED_CUDA_GROUP_THREAD;
      } else {
        args.variant = len <= kWarpReduceMaxLen ? CUBED_CUDA_GROUP_WARP : CUBED_CUDA_GROUP_BLOCK;
      }
      break;
    }
    case CudaFamily::kSoftmax: {
      args.axis = out.rank - 1;
      const uint64_t len = out.shape[out.rank - 1];
      args.count = len == 0 ? 0 : args.count / len;
      args.variant = len <= kWarpSoftmaxMaxLen ? CUBED_CUDA_GROUP_WARP : CUBED_CUDA_GROUP_BLOCK;
      break;
    }
    case CudaFamily::kMatmul: {
      uint64_t batches = 1;
      for (uint32_t d = 0; d + 2 < out.rank; ++d) batches *= out.shape[d];
      args.count = batches;
      break;
    }
  }
  return args;
}

CudaLaunchDims BuiltinLaunchDims(const BuiltinCall& call, const CudaBuiltinArgs& args,
                                 uint32_t sm_count) {
  CudaLaunchDims dims;
  dims.block[0] = kBlock;
  const uint64_t max_grid = uint64_t{std::max<uint32_t>(sm_count, 1)} * kBlocksPerSm;
  absl::StatusOr<CudaFamily> family = FindCudaFamily(call.name, args.num_buffers);
  if (!family.ok()) return dims;
  uint64_t blocks = 1;
  switch (*family) {
    case CudaFamily::kFill:
    case CudaFamily::kCopy:
    case CudaFamily::kCast:
    case CudaFamily::kUnary:
    case CudaFamily::kBinary: {
      const uint64_t items =
          (args.flags & CUBED_CUDA_DENSE) != 0 ? CeilDiv(args.count, 4) : args.count;
      blocks = CeilDiv(items, kBlock);
      break;
    }
    case CudaFamily::kReduce:
    case CudaFamily::kSoftmax: {
      const uint64_t per_block = args.variant == CUBED_CUDA_GROUP_BLOCK  ? 1
                                 : args.variant == CUBED_CUDA_GROUP_WARP ? kBlock / 32
                                                                         : kBlock;
      blocks = CeilDiv(args.count, per_block);
      // A block per output: large blocks, so that few long outputs still fill the device.
      if (args.variant == CUBED_CUDA_GROUP_BLOCK) dims.block[0] = kLargeBlock;
      break;
    }
    case CudaFamily::kMatmul: {
      const CudaTensorArg& c = args.buffers[2];
      if (c.rank >= 2 && c.rank <= CUBED_CUDA_MAX_RANK) {
        blocks = args.count * CeilDiv(c.shape[c.rank - 2], 64) * CeilDiv(c.shape[c.rank - 1], 64);
      }
      break;
    }
  }
  dims.grid[0] = static_cast<uint32_t>(std::clamp<uint64_t>(blocks, 1, max_grid));
  return dims;
}

}  // namespace cubed::kernels
