#pragma once

// Recorded graphs: a session's sequence of executes, recorded once and replayed with one command.
//
// Note [Recorded graphs]: (session.proto, "Graphs"; docs/api.md, "Recorded graphs") between a
// stream's begin_graph and end_graph each execute is checked exactly as if it ran (the Device's
// launch checks, and ValidateBuiltin for builtins) and kept as a resolved Launch; nothing runs.
// Every other command runs as usual meanwhile. Some handles are the graph's parameters: each
// place a step binds one is noted (ParameterUse), and a replay puts the slice of another handle
// of the same size there, so every binding range checked at recording stays inside its
// allocation. Every other handle a step binds is held: the graph takes a hold on its slice
// (Session::HoldSlice), and releasing the handle then erases the id but keeps the slice, still
// accounted to the session's quotas, until the last graph holding it is released. So a replay
// never touches freed memory, and memory a graph keeps cannot escape the quotas (ggml-rpc's
// graph cache kept raw pointers past a free: GHSA-2phh-px2f-2qmx). A replay re-checks only what
// can have changed since recording: each binding's handle, poison and size. The backend runs the
// steps (ComputeServer::ExecuteGraph) and may keep state between replays in the graph's
// GraphExecutable: CUDA captures a CUDA graph (Note [CUDA graph replays], server/compute/cuda/).
// A failed recording (a bad begin_graph, a step that fails its checks, a limit) records nothing
// further, and end_graph answers its first failure; the graph id stays free. Limits: kMaxGraphs
// graphs a session, kMaxGraphSteps steps a graph, kMaxGraphBytes host bytes of graphs a session.

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/ids.h"
#include "server/compute/compute_server.h"

namespace cubed {

inline constexpr size_t kMaxGraphs = 1024;
inline constexpr size_t kMaxGraphSteps = 65536;
inline constexpr size_t kMaxGraphParameters = 1024;
inline constexpr uint64_t kMaxGraphBytes = uint64_t{256} << 20;

// Where a step binds a parameter: launch `step`'s buffer `buffer`, or with kCountBinding its
// dynamic cube count.
struct ParameterUse {
  static constexpr uint32_t kCountBinding = ~uint32_t{0};
  uint32_t step = 0;
  uint32_t buffer = 0;
  uint32_t parameter = 0;
};

// One graph, recorded or being recorded. Owned by its Session, on the device's loop thread.
class RecordedGraph {
 public:
  // `parameter_sizes[i]`: the byte size of parameter i's handle at begin_graph.
  RecordedGraph(GraphId id, std::vector<HandleId> parameters,
                std::vector<uint64_t> parameter_sizes);

  GraphId id() const { return id_; }
  // The handle ids begin_graph named, in order (they need not be live any more).
  absl::Span<const HandleId> parameters() const { return parameters_; }
  size_t parameter_count() const { return parameters_.size(); }
  uint64_t parameter_size(size_t i) const { return parameter_sizes_[i]; }
  // The parameter `handle` is, or -1 when it is none.
  int ParameterIndex(HandleId handle) const;
  // Whether some step writes parameter i (its bindings are poisoned when a replay fails).
  bool writes_parameter(size_t i) const { return written_[i]; }

  // Appends a step: `launch` as resolved at recording (a borrowed kernel is copied: the step
  // owns it), `uses` its parameter bindings (their `step` is set here), `writes` the parameters
  // it writes.
  void AddStep(Launch launch, absl::Span<const ParameterUse> uses,
               absl::Span<const uint32_t> writes);
  size_t step_count() const { return launches_.size(); }

  // Puts parameter i's new slice into every place it is bound; `slices` has one per parameter.
  void Bind(absl::Span<const SliceId> slices);
  // The steps, as bound by the last Bind (or as recorded).
  absl::Span<const Launch> launches() const { return launches_; }
  // Where the steps bind parameters, in step order.
  absl::Span<const ParameterUse> uses() const { return uses_; }

  // The slices the graph holds (not its parameters'). AddHeld returns false when the graph
  // held `slice` already.
  const absl::flat_hash_set<SliceId>& held() const { return held_; }
  bool AddHeld(SliceId slice) { return held_.insert(slice).second; }

  // Host bytes the graph takes (its launches and bookkeeping), estimated for kMaxGraphBytes.
  uint64_t bytes() const { return bytes_; }

  // The backend's state across replays (ComputeServer::ExecuteGraph).
  std::unique_ptr<GraphExecutable>& executable() { return executable_; }

 private:
  GraphId id_;
  std::vector<HandleId> parameters_;
  std::vector<uint64_t> parameter_sizes_;
  std::vector<bool> written_;
  std::vector<Launch> launches_;
  std::vector<ParameterUse> uses_;
  absl::flat_hash_set<SliceId> held_;
  uint64_t bytes_ = 0;
  std::unique_ptr<GraphExecutable> executable_;
};

// A stream's recording in progress (Session::recording()): the graph, or the recording's first
// failure (then nothing more is recorded).
struct GraphRecording {
  std::unique_ptr<RecordedGraph> graph;
  absl::Status failure;
};

// Host bytes a launch takes in a graph, for kMaxGraphBytes.
uint64_t LaunchBytes(const Launch& launch);

}  // namespace cubed
