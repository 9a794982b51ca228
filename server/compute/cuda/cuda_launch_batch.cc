// CudaLaunchBatch: Note [Launch batches] (cuda_launch_batch.h).

#include "server/compute/cuda/cuda_launch_batch.h"

#include "common/cuda/cuda_driver.h"
#include "common/status_macros.h"

namespace cubed {

CudaLaunchBatch::CudaLaunchBatch(CUstream stream) : stream_(stream) {
  queued_.reserve(kMaxLaunches);
}

CudaLaunchBatch::~CudaLaunchBatch() { DropChains(); }

void CudaLaunchBatch::DropChains() {
  for (Chain& chain : chains_) {
    if (chain.exec != nullptr) Cu().GraphExecDestroy(chain.exec);
    if (chain.graph != nullptr) Cu().GraphDestroy(chain.graph);
    chain = Chain();
  }
}

bool CudaLaunchBatch::Supported() { return Cu().GraphCreate != nullptr; }

void CudaLaunchBatch::Add(CUfunction function, const kernels::CudaLaunchDims& dims,
                          const CudaBuiltinArgs& args) {
  queued_.push_back(Queued{function, dims, args});
}

CUDA_KERNEL_NODE_PARAMS CudaLaunchBatch::NodeParams(Queued& q, void** params) {
  params[0] = &q.args;
  CUDA_KERNEL_NODE_PARAMS p = {};
  p.func = q.function;
  p.gridDimX = q.dims.grid[0];
  p.gridDimY = q.dims.grid[1];
  p.gridDimZ = q.dims.grid[2];
  p.blockDimX = q.dims.block[0];
  p.blockDimY = q.dims.block[1];
  p.blockDimZ = q.dims.block[2];
  p.sharedMemBytes = q.dims.shared_bytes;
  p.kernelParams = params;
  return p;
}

absl::Status CudaLaunchBatch::Launch() {
  if (queued_.empty()) return absl::OkStatus();
  Chain& chain = chains_[queued_.size()];
  absl::Status status;
  if (queued_.size() == 1 || !Supported()) {
    status = LaunchOneByOne();
  } else if (chain.retry_in > 0) {  // Its chain failed lately: this length goes one by one.
    --chain.retry_in;
    status = LaunchOneByOne();
  } else {
    status = Replay();
  }
  queued_.clear();
  return status;
}

absl::Status CudaLaunchBatch::LaunchOneByOne() {
  for (Queued& q : queued_) {
    void* params[] = {&q.args};
    CU_RETURN_IF_ERROR(Cu().LaunchKernel(q.function, q.dims.grid[0], q.dims.grid[1], q.dims.grid[2],
                                         q.dims.block[0], q.dims.block[1], q.dims.block[2],
                                         q.dims.shared_bytes, stream_, params, nullptr));
  }
  return absl::OkStatus();
}

absl::Status CudaLaunchBatch::Instantiate(Chain& chain) {
  CU_RETURN_IF_ERROR(Cu().GraphCreate(&chain.graph, 0));
  chain.nodes.resize(queued_.size());
  for (size_t i = 0; i < queued_.size(); ++i) {
    void* params[1];
    const CUDA_KERNEL_NODE_PARAMS p = NodeParams(queued_[i], params);
    CU_RETURN_IF_ERROR(Cu().GraphAddKernelNode(
        &chain.nodes[i], chain.graph, i == 0 ? nullptr : &chain.nodes[i - 1], i == 0 ? 0 : 1, &p));
  }
  CU_RETURN_IF_ERROR(Cu().GraphInstantiate(&chain.exec, chain.graph, 0));
  ++chains_made_;
  return absl::OkStatus();
}

absl::Status CudaLaunchBatch::Replay() {
  Chain& chain = chains_[queued_.size()];
  if (chain.exec == nullptr) {
    if (!Instantiate(chain).ok()) {  // Out of memory, say: this length goes one by one.
      if (chain.graph != nullptr) Cu().GraphDestroy(chain.graph);
      chain = Chain();
      chain.retry_in = kRetryAfter;
      return LaunchOneByOne();
    }
  } else {
    for (size_t i = 0; i < queued_.size(); ++i) {
      void* params[1];
      const CUDA_KERNEL_NODE_PARAMS p = NodeParams(queued_[i], params);
      const CUresult set = Cu().GraphExecKernelNodeSetParams(chain.exec, chain.nodes[i], &p);
      if (set != CUDA_SUCCESS) {
        if (IsStickyCudaError(set)) return CU_STATUS(set);  // The context is gone.
        // Nothing of this batch was sent: it goes one by one (a launch the driver refuses now
        // fails there with the driver's error), and so does its length for a while.
        chain.retry_in = kRetryAfter;
        return LaunchOneByOne();
      }
    }
  }
  const CUresult launched = Cu().GraphLaunch(chain.exec, stream_);
  if (launched != CUDA_SUCCESS) {
    if (IsStickyCudaError(launched)) return CU_STATUS(launched);  // The context is gone.
    // A replay refused with a non-sticky error (out of memory, say) queued nothing: the launches
    // go one by one.
    chain.retry_in = kRetryAfter;
    return LaunchOneByOne();
  }
  ++stats_.replays;
  stats_.launches += queued_.size();
  return absl::OkStatus();
}

}  // namespace cubed
