// CudaServer::ExecuteGraph: recorded graphs replayed as CUDA graphs.
//
// Note [CUDA graph replays]: a recorded graph (Note [Recorded graphs], server/channel/graph.h)
// of builtin launches with static cube counts replays as one cuGraphLaunch. The graph is captured
// from the ordinary launch path (the stream in thread-local capture mode: the loop thread's
// launches are recorded, nothing runs) at the first replay, and again whenever what it captured
// is stale: its parameters' slices at other device addresses than before, the module cache
// unloaded a module since (a captured kernel may be gone), or the launch workspace moved. A
// capture of the same shape updates the instantiated graph in place (cuGraphExecUpdate), which
// is cheaper than instantiating. Every other slice a graph binds is held by it and does not move.
// A graph keeps up to four captures, one per set of parameter addresses (least recently used
// replaced), so that alternating between a few sets of buffers does not capture every time.
// Not captured: client kernels (their metadata is copied from a staging buffer that a replay
// would read again, changed) and dynamic cube counts (read with a stream sync); such graphs, and
// a graph whose capture failed twice, replay launch by launch. A capture that needs the launch
// workspace to grow (growing waits for the stream, which a capture cannot) is ended, the
// workspace grown outside it, and captured once more.

#include <algorithm>
#include <memory>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "common/cuda/cuda_driver.h"
#include "common/status_macros.h"
#include "server/compute/cuda/cuda_server.h"
#include "spdlog/spdlog.h"

namespace cubed {
namespace {

// One instantiated CUDA graph of a recorded graph and what it was captured with.
struct CapturedGraph {
  CUgraphExec exec = nullptr;
  absl::InlinedVector<CUdeviceptr, 8> parameters;  // Each parameter slice's address.
  CUdeviceptr workspace = 0;
  uint64_t evictions = 0;
  uint64_t last_used = 0;  // Replay count at its last use (least recently used is replaced).
};

// A recorded graph's CUDA graphs: up to kMaxCaptures, one per set of parameter addresses, so
// that a client alternating between a few sets of buffers (double buffering) does not capture at
// every replay. Destroyed on the loop thread; a launch already queued from one completes
// (cuGraphExecDestroy neither waits for it nor cuts it short).
class CudaGraphExecutable final : public GraphExecutable {
 public:
  static constexpr size_t kMaxCaptures = 4;
  ~CudaGraphExecutable() override { DropCaptures(); }

  // Destroys every captured graph.
  void DropCaptures() {
    for (CapturedGraph& c : captures) {
      if (c.exec != nullptr) Cu().GraphExecDestroy(c.exec);
    }
    captures.clear();
  }

  bool capturable = false;
  int failed_captures = 0;
  uint64_t replays = 0;
  absl::InlinedVector<CapturedGraph, kMaxCaptures> captures;
};

bool Capturable(absl::Span<const Launch> launches) {
  if (launches.empty() || Cu().StreamBeginCapture == nullptr) return false;
  return std::all_of(launches.begin(), launches.end(),
                     [](const Launch& l) { return l.Kernel().is_builtin && !l.count.dynamic; });
}

}  // namespace

absl::Status CudaServer::ExecuteGraph(absl::Span<const Launch> launches,
                                      absl::Span<const SliceId> parameters,
                                      std::unique_ptr<GraphExecutable>& executable) {
  LaunchHeldBackOrLog();
  RETURN_IF_ERROR(LostStatus());
  RETURN_IF_ERROR(context_->MakeCurrent());
  if (executable == nullptr) {
    auto created = std::make_unique<CudaGraphExecutable>();
    created->capturable = Capturable(launches);
    executable = std::move(created);
  }
  auto& graph = static_cast<CudaGraphExecutable&>(*executable);
  if (!graph.capturable) return ComputeServer::ExecuteGraph(launches, parameters, executable);

  absl::InlinedVector<CUdeviceptr, 8> addresses;
  for (SliceId slice : parameters) {
    ASSIGN_OR_RETURN(CUdeviceptr address, DevicePointer(ResolvedBinding{slice, 0, 0}));
    addresses.push_back(address);
  }
  ++graph.replays;
  CapturedGraph* use = nullptr;
  for (CapturedGraph& c : graph.captures) {
    if (c.parameters == addresses) use = &c;
  }
  const bool current = use != nullptr && use->evictions == modules_->evictions() &&
                       use->workspace == workspace_->pointer();
  if (!current) {
    if (use == nullptr && graph.captures.size() < CudaGraphExecutable::kMaxCaptures) {
      use = &graph.captures.emplace_back();
    } else if (use == nullptr) {  // Replace the least recently used (updated in place).
      use = &*std::min_element(
          graph.captures.begin(), graph.captures.end(),
          [](const CapturedGraph& a, const CapturedGraph& b) { return a.last_used < b.last_used; });
    }
    const uint64_t evictions = modules_->evictions();
    absl::Status captured = CaptureGraph(launches, &use->exec, /*grown=*/false);
    if (captured.ok() && modules_->evictions() != evictions) {
      captured = absl::AbortedError("the module cache unloaded a module during the capture");
    }
    if (!captured.ok()) {
      RETURN_IF_ERROR(LostStatus());
      spdlog::debug("graph capture failed ({}); replaying launch by launch", captured.ToString());
      if (use->exec != nullptr) Cu().GraphExecDestroy(use->exec);  // Stale either way.
      graph.captures.erase(graph.captures.begin() + (use - graph.captures.data()));
      if (++graph.failed_captures >= 2) {
        graph.capturable = false;
        graph.DropCaptures();
      }
      return ComputeServer::ExecuteGraph(launches, parameters, executable);
    }
    use->parameters = addresses;
    use->evictions = evictions;
    use->workspace = workspace_->pointer();
  }
  use->last_used = graph.replays;
  return Check(CU_STATUS(Cu().GraphLaunch(use->exec, stream_)));
}

absl::Status CudaServer::CaptureGraph(absl::Span<const Launch> launches, CUgraphExec* exec,
                                      bool grown) {
  Capture capture;
  CU_RETURN_IF_ERROR(Cu().StreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  capture_ = &capture;
  absl::Status status;
  for (size_t i = 0; i < launches.size() && status.ok(); ++i) {
    status = Execute(launches[i]);
    if (!status.ok())
      status = absl::Status(status.code(), absl::StrCat("step ", i, ": ", status.message()));
  }
  capture_ = nullptr;
  CUgraph captured = nullptr;
  const CUresult ended = Cu().StreamEndCapture(stream_, &captured);  // Ends it whatever happened.
  if (status.ok()) status = CU_STATUS(ended);
  if (!status.ok()) {
    if (captured != nullptr) Cu().GraphDestroy(captured);
    if (capture.workspace_bytes > 0 && !grown) {
      RETURN_IF_ERROR(workspace_->Get(capture.workspace_bytes).status());
      return CaptureGraph(launches, exec, /*grown=*/true);
    }
    return status;
  }
  if (*exec != nullptr) {
    CUgraphExecUpdateResultInfo info;
    if (Cu().GraphExecUpdate(*exec, captured, &info) == CUDA_SUCCESS) {
      Cu().GraphDestroy(captured);
      return absl::OkStatus();
    }
    Cu().GraphExecDestroy(*exec);
    *exec = nullptr;
  }
  const CUresult instantiated = Cu().GraphInstantiate(exec, captured, 0);
  Cu().GraphDestroy(captured);
  if (instantiated != CUDA_SUCCESS) *exec = nullptr;
  CU_RETURN_IF_ERROR(instantiated);
  return absl::OkStatus();
}

}  // namespace cubed
