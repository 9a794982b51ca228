#pragma once

// CudaLaunchBatch: builtin launches queued on the loop and sent to the stream together, as the
// replay of a CUDA graph.
//
// Note [Launch batches]
// A stream launch costs the launching thread 3.4-4 us of the driver's time on an H100 host
// (cuLaunchKernel, whatever the arguments: GPU runs 84-85), and the device loop launches one
// kernel at a time, so pipelined tiny kernels could never run faster through the daemon than
// in-process launches, and ran slower by cubed's own work. The same driver sets the arguments
// of an instantiated graph's kernel node in 0.17 us and runs a chain of such nodes at 0.8 us a
// kernel (GPU run 85: a 32-node chain replayed with every node's arguments set anew, 0.807 us a
// launch in all). So while a session stream runs a run of executes (Note [Claimed executes],
// server/service/stream/session_stream.cc), the CUDA backend queues their launches here instead
// of launching each, and at the end of the run (or when 32 are queued, or before anything else
// touches the stream) sends them as one replay of a chain of as many kernel nodes, each set to its
// launch: the same kernels, arguments and grids, in the same order on the same stream.
//
// What keeps this exact:
// * Only launches that need nothing but the stream are queued: builtin kernels with a static
//   cube count, no launch workspace and no cuBLAS, outside a capture, whose function is loaded
//   and whose call launched once as a stream launch already (so that a launch error, which the
//   driver reports at the launch, is reported to the command that caused it, and a batch's
//   launches are ones the driver accepted). Anything else launches the batch first, then itself.
// * Nothing else reaches the stream while launches are queued: the batch is open only while the
//   loop runs a stream's claimed executes, and everything the backend does besides such an
//   Execute sends the batch first (CudaServer::LaunchHeldBack).
// * The queued arguments are copied; the buffers they address stay alive until the batch is
//   sent (no command runs in between that could free them), and the driver copies the arguments
//   into the graph at cuGraphExecKernelNodeSetParams, so a replay still running when the chain is
//   set again keeps its own (the driver's contract for executable graphs).
// * A batch that cannot go as a graph (the graph calls missing, an instantiation, an argument
//   update or the replay's launch that fails: nothing of the batch was sent then) goes launch by
//   launch, as before. A held launch that the driver refuses even so, although it accepted the
//   same call before, makes the device lost (CudaServer::SendLaunchBatch): its command was
//   answered OK already, and which commands' work is missing can no longer be told apart, so
//   every later call fails UNAVAILABLE rather than answer over missing work.
// * Chains are instantiated once per length, from the first batch of that length, and dropped
//   before the module cache unloads a module (their nodes may name its functions). A length whose
//   chain failed (to instantiate, to take a batch's arguments, to start) goes one by one for
//   kRetryAfter batches, then is tried again; a sticky error is returned as it is (the context is
//   gone, and with it the device).
// * A traced command (a session whose trace has a device clock) is timed by device marks, which
//   send what was held back first: a traced run is timed as stream launches.

#include <cuda.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/cuda/builtin_args.h"
#include "kernels/cuda/cuda_kernels.h"
#include "server/compute/compute_server.h"

namespace cubed {

// Owned by the server-loop thread, with the device's context current on it.
class CudaLaunchBatch {
 public:
  static constexpr size_t kMaxLaunches = 32;
  // Batches of a length whose chain failed that go one by one before it is tried again.
  static constexpr uint32_t kRetryAfter = 1024;

  explicit CudaLaunchBatch(CUstream stream);
  ~CudaLaunchBatch();  // Destroys the chains; replays already queued complete.

  CudaLaunchBatch(const CudaLaunchBatch&) = delete;
  CudaLaunchBatch& operator=(const CudaLaunchBatch&) = delete;

  // Whether the driver has the graph calls a batch needs.
  static bool Supported();

  bool empty() const { return queued_.empty(); }
  size_t size() const { return queued_.size(); }
  bool full() const { return queued_.size() == kMaxLaunches; }

  // Queues a launch of `function` with `dims` and a copy of `args`. The batch must not be full.
  void Add(CUfunction function, const kernels::CudaLaunchDims& dims, const CudaBuiltinArgs& args);

  // Sends what was queued to the stream, in order, and empties the batch (also on error). One
  // launch goes as a stream launch; more as a chain's replay, or one by one where that fails.
  // Errors are the driver's, of the first stream launch that failed (those after it are not
  // sent).
  absl::Status Launch();

  // Destroys every chain (the module cache is about to unload a module their nodes may name).
  // Replays already queued complete.
  void DropChains();

  // Empties the batch without sending it (the device is lost).
  void Drop() { queued_.clear(); }

  // Replays sent and the launches in them (GetStats, metrics), and chains instantiated (tests).
  const LaunchBatchStats& stats() const { return stats_; }
  uint64_t chains_made() const { return chains_made_; }

 private:
  struct Queued {
    CUfunction function = nullptr;
    kernels::CudaLaunchDims dims;
    CudaBuiltinArgs args;
  };
  // An instantiated chain of kernel nodes, each depending on the one before.
  struct Chain {
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    std::vector<CUgraphNode> nodes;
    uint32_t retry_in = 0;  // After a failure: batches of this length to send one by one first.
  };

  static CUDA_KERNEL_NODE_PARAMS NodeParams(Queued& q, void** params);
  // Builds and instantiates the chain of queued_.size() nodes, set to queued_'s launches.
  absl::Status Instantiate(Chain& chain);
  absl::Status LaunchOneByOne();
  absl::Status Replay();

  CUstream stream_;
  std::vector<Queued> queued_;
  std::array<Chain, kMaxLaunches + 1> chains_;  // By length.
  LaunchBatchStats stats_;
  uint64_t chains_made_ = 0;
};

}  // namespace cubed
