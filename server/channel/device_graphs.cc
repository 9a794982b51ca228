// Device: recorded graphs (Note [Recorded graphs], graph.h).

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/channel/device.h"

namespace cubed {

absl::StatusOr<std::unique_ptr<RecordedGraph>> Device::NewGraph(
    Session& s, GraphId graph, absl::Span<const HandleId> parameters) {
  if (graph.value() == 0) {
    return absl::InvalidArgumentError("begin_graph.graph: 0; a graph id is 1 .. 2^64 - 1");
  }
  if (s.FindGraph(graph) != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("begin_graph.graph: graph ", graph.value(),
                                                      " already exists in this session"));
  }
  if (s.graph_count() >= kMaxGraphs) {
    return absl::ResourceExhaustedError(absl::StrCat("begin_graph: this session holds ",
                                                     s.graph_count(), " graphs, the most it may (",
                                                     kMaxGraphs, "); release one first"));
  }
  if (parameters.size() > kMaxGraphParameters) {
    return absl::InvalidArgumentError(absl::StrCat("begin_graph.parameters: ", parameters.size(),
                                                   " given; at most ", kMaxGraphParameters));
  }
  std::vector<uint64_t> sizes;
  absl::flat_hash_set<HandleId> seen;
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (const absl::Status* poison = s.PoisonOf(parameters[i])) return *poison;
    const HandleEntry* entry = s.Find(parameters[i]);
    if (entry == nullptr) {
      return absl::NotFoundError(absl::StrCat("begin_graph.parameters[", i, "]: handle ",
                                              parameters[i].value(),
                                              " is not a handle of this session"));
    }
    if (!seen.insert(parameters[i]).second) {
      return absl::InvalidArgumentError(absl::StrCat("begin_graph.parameters[", i, "]: handle ",
                                                     parameters[i].value(),
                                                     " is already a parameter of the graph"));
    }
    sizes.push_back(entry->size);
  }
  auto recorded = std::make_unique<RecordedGraph>(
      graph, std::vector<HandleId>(parameters.begin(), parameters.end()), std::move(sizes));
  if (s.graph_bytes() + recorded->bytes() > kMaxGraphBytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("begin_graph: the session's graphs take ", s.graph_bytes(),
                     " bytes of daemon memory, the most they may is ", kMaxGraphBytes));
  }
  return recorded;
}

void Device::BeginGraph(SessionId session, GraphId graph, absl::Span<const HandleId> parameters,
                        const absl::Status& invalid, absl::Time now) {
  absl::StatusOr<Session*> found = FindSession(session, now);
  if (!found.ok()) return;
  Session& s = **found;
  if (std::unique_ptr<GraphRecording>& recording = s.recording(); recording != nullptr) {
    if (recording->failure.ok()) {
      recording->failure = absl::FailedPreconditionError(
          absl::StrCat("begin_graph: graph ", recording->graph->id().value(),
                       " was still recording (graphs do not nest: end_graph first)"));
      DropHolds(s, *recording->graph);
      recording->graph.reset();
    }
    return;
  }
  auto recording = std::make_unique<GraphRecording>();
  if (!invalid.ok()) {
    recording->failure = invalid;
  } else if (absl::StatusOr<std::unique_ptr<RecordedGraph>> g = NewGraph(s, graph, parameters);
             g.ok()) {
    s.AddGraphBytes((*g)->bytes());
    recording->graph = *std::move(g);
  } else {
    recording->failure = g.status();
  }
  s.recording() = std::move(recording);
}

bool Device::Recording(SessionId session) const {
  const Session* s = sessions_.Get(session);
  return s != nullptr && s->is_recording();
}

absl::Status Device::RecordExecute(SessionId session, ExecuteCommand& command,
                                   absl::Span<const HandleId> outputs, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  GraphRecording* recording = s->recording().get();
  if (recording == nullptr) {
    return absl::FailedPreconditionError("execute: no graph is recording");
  }
  if (!recording->failure.ok()) return absl::OkStatus();  // Answered by end_graph.
  RecordedGraph& graph = *recording->graph;
  absl::Status status;
  absl::StatusOr<Launch> launch = PrepareLaunch(*s, command);
  if (!launch.ok()) {
    status = launch.status();
  } else if (graph.step_count() >= kMaxGraphSteps) {
    status = absl::ResourceExhaustedError(absl::StrCat("graph ", graph.id().value(), " holds ",
                                                       kMaxGraphSteps,
                                                       " executes, the most a graph may"));
  } else if (command.kernel.is_builtin) {
    absl::InlinedVector<uint64_t, kernels::kMaxBuiltinBuffers> sizes;
    for (const ResolvedBinding& b : launch->buffers) sizes.push_back(b.size);
    status = kernels::ValidateBuiltin(command.kernel.builtin, sizes);
  }
  if (status.ok()) {
    launch->kernel = std::move(command.kernel);
    const uint64_t bytes = LaunchBytes(*launch);
    if (s->graph_bytes() + bytes > kMaxGraphBytes) {
      command.kernel = std::move(launch->kernel);
      status = absl::ResourceExhaustedError(
          absl::StrCat("the session's graphs take ", s->graph_bytes(),
                       " bytes of daemon memory; this execute would take them past the most they "
                       "may, ",
                       kMaxGraphBytes));
    }
  }
  if (!status.ok()) {
    FailRecording(session, status);
    return status;
  }
  absl::InlinedVector<ParameterUse, 4> uses;
  absl::InlinedVector<uint32_t, 2> writes;
  auto bind = [&](HandleId handle, const ResolvedBinding& binding, uint32_t buffer) {
    if (const int p = graph.ParameterIndex(handle); p >= 0) {
      uses.push_back(ParameterUse{0, buffer, static_cast<uint32_t>(p)});
    } else if (graph.AddHeld(binding.slice)) {
      s->HoldSlice(binding.slice);
    }
  };
  for (size_t i = 0; i < command.buffers.size(); ++i) {
    bind(command.buffers[i].handle, launch->buffers[i], static_cast<uint32_t>(i));
  }
  if (command.dynamic_count) {
    bind(command.count_binding.handle, launch->count.binding, ParameterUse::kCountBinding);
  }
  for (HandleId out : outputs) {
    if (const int p = graph.ParameterIndex(out); p >= 0) writes.push_back(static_cast<uint32_t>(p));
  }
  const uint64_t before = graph.bytes();
  graph.AddStep(*std::move(launch), uses, writes);
  s->AddGraphBytes(graph.bytes() - before);
  return absl::OkStatus();
}

void Device::FailRecording(SessionId session, const absl::Status& status) {
  Session* s = sessions_.Get(session);
  if (s == nullptr || s->recording() == nullptr || !s->recording()->failure.ok()) return;
  GraphRecording& recording = *s->recording();
  const RecordedGraph& graph = *recording.graph;
  recording.failure = absl::Status(
      status.code(), absl::StrCat("graph ", graph.id().value(), " step ", graph.step_count(),
                                  " (execute): ", status.message()));
  DropHolds(*s, graph);
  recording.graph.reset();
}

absl::StatusOr<uint64_t> Device::EndGraph(SessionId session, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  std::unique_ptr<GraphRecording> recording = std::move(s->recording());
  if (recording == nullptr) {
    return absl::FailedPreconditionError("end_graph: no graph is recording");
  }
  if (!recording->failure.ok()) return recording->failure;
  const uint64_t steps = recording->graph->step_count();
  s->AddGraph(std::move(recording->graph));
  return steps;
}

absl::Status Device::ReplayGraph(SessionId session, GraphId graph,
                                 absl::Span<const HandleId> bindings, absl::Time now,
                                 HandleList* written) {
  written->clear();
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  if (s->recording() != nullptr) {
    return absl::FailedPreconditionError(
        "replay_graph: a graph is recording; replays are not recorded (end_graph first)");
  }
  RecordedGraph* g = s->FindGraph(graph);
  if (g == nullptr) {
    return absl::NotFoundError(absl::StrCat("replay_graph.graph: graph ", graph.value(),
                                            " is not a graph of this session"));
  }
  if (bindings.size() != g->parameter_count()) {
    return absl::InvalidArgumentError(absl::StrCat("replay_graph.bindings: ", bindings.size(),
                                                   " given; graph ", graph.value(), " has ",
                                                   g->parameter_count(), " parameters"));
  }
  for (size_t i = 0; i < bindings.size(); ++i) {
    if (g->writes_parameter(i)) written->push_back(bindings[i]);
  }
  absl::InlinedVector<SliceId, 8> slices;
  for (size_t i = 0; i < bindings.size(); ++i) {
    if (const absl::Status* poison = s->PoisonOf(bindings[i])) return *poison;
    const HandleEntry* entry = s->Find(bindings[i]);
    if (entry == nullptr) {
      return absl::NotFoundError(absl::StrCat("replay_graph.bindings[", i, "]: handle ",
                                              bindings[i].value(),
                                              " is not a handle of this session"));
    }
    if (entry->size != g->parameter_size(i)) {
      return absl::InvalidArgumentError(
          absl::StrCat("replay_graph.bindings[", i, "]: handle ", bindings[i].value(), " holds ",
                       entry->size, " bytes; parameter ", i, " of graph ", graph.value(),
                       " was recorded with ", g->parameter_size(i)));
    }
    slices.push_back(entry->slice);
  }
  ScopedTraceEvent trace(s->trace(), "kernel");
  trace.set_name("graph");
  g->Bind(slices);
  const bool marked =
      s->trace() != nullptr && s->trace()->has_device_clock() && !s->trace()->full();
  const uint64_t begin = marked ? server_->DeviceMark() : 0;
  absl::Status status = server_->ExecuteGraph(g->launches(), slices, g->executable());
  if (marked) trace.set_marks(begin, server_->DeviceMark());
  if (!status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat("graph ", graph.value(), " ", status.message()));
  }
  s->CountKernels(g->step_count());
  return absl::OkStatus();
}

absl::Status Device::ReleaseGraph(SessionId session, GraphId graph, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  std::unique_ptr<RecordedGraph> g = s->TakeGraph(graph);
  if (g == nullptr) {
    return absl::NotFoundError(absl::StrCat("release_graph.graph: graph ", graph.value(),
                                            " is not a graph of this session"));
  }
  g->executable().reset();  // Before the memory it may refer to is freed.
  DropHolds(*s, *g);
  return absl::OkStatus();
}

void Device::DropHolds(Session& s, const RecordedGraph& graph) {
  s.SubtractGraphBytes(graph.bytes());
  for (SliceId slice : graph.held()) {
    if (std::optional<uint64_t> orphan = s.DropSliceHold(slice); orphan.has_value()) {
      server_->Free(slice);
      sessions_.Account(s, *orphan, -1);
    }
  }
}

}  // namespace cubed
