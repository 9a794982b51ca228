#include "server/channel/graph_checkpoint.h"

#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "common/status_macros.h"
#include "kernels/builtin.h"

namespace cubed {
namespace {

// Where a parameter is bound: (step, buffer or ParameterUse::kCountBinding).
using Position = std::pair<uint32_t, uint32_t>;

absl::Status GraphCorrupt(const CheckpointedGraph& graph, absl::string_view what) {
  return absl::DataLossError(absl::StrCat("graph ", graph.id.value(), ": ", what));
}

absl::Status StepCorrupt(const CheckpointedGraph& graph, size_t step, absl::string_view what) {
  return absl::DataLossError(absl::StrCat("graph ", graph.id.value(), " step ", step, ": ", what));
}

// The parameters, their sizes and what is written, checked as begin_graph checks them.
absl::Status CheckParameters(const CheckpointedGraph& graph) {
  if (graph.id.value() == 0) return GraphCorrupt(graph, "the id is 0");
  if (graph.parameters.size() > kMaxGraphParameters ||
      graph.parameter_sizes.size() != graph.parameters.size()) {
    return GraphCorrupt(graph, absl::StrCat(graph.parameters.size(), " parameters with ",
                                            graph.parameter_sizes.size(), " sizes; at most ",
                                            kMaxGraphParameters, ", one size each"));
  }
  absl::flat_hash_set<HandleId> seen;
  for (size_t i = 0; i < graph.parameters.size(); ++i) {
    if (graph.parameters[i].value() == 0 || !seen.insert(graph.parameters[i]).second ||
        graph.parameter_sizes[i] == 0) {
      return GraphCorrupt(
          graph, absl::StrCat("parameter ", i, " (handle ", graph.parameters[i].value(), ", ",
                              graph.parameter_sizes[i], " bytes) is 0, repeated or empty"));
    }
  }
  if (graph.steps.size() > kMaxGraphSteps) {
    return GraphCorrupt(graph,
                        absl::StrCat(graph.steps.size(), " steps; at most ", kMaxGraphSteps));
  }
  for (uint32_t p : graph.written) {
    if (p >= graph.parameters.size() || graph.steps.empty()) {
      return GraphCorrupt(
          graph, absl::StrCat("written parameter ", p, " of ", graph.parameters.size(), " (",
                              graph.steps.size(), " steps)"));
    }
  }
  return absl::OkStatus();
}

// Resolves the bindings of one step against the restored targets; collects the parameter uses.
class StepResolver {
 public:
  StepResolver(const CheckpointedGraph& graph, size_t step, const GraphTargets& targets)
      : graph_(graph), step_(step), targets_(targets) {}

  // `what` names the binding in errors ("buffer 2", "dynamic count").
  absl::StatusOr<ResolvedBinding> Resolve(const CheckpointedBinding& b, uint32_t position,
                                          absl::string_view what) {
    SliceId slice = 0;
    uint64_t size = 0;
    std::string target;
    switch (b.target) {
      case CheckpointedBinding::Target::kParameter:
        if (b.ref >= graph_.parameters.size()) {
          return StepCorrupt(
              graph_, step_,
              absl::StrCat(what, ": parameter ", b.ref, " of ", graph_.parameters.size()));
        }
        size = graph_.parameter_sizes[b.ref];
        uses_.push_back(ParameterUse{0, position, static_cast<uint32_t>(b.ref)});
        target = absl::StrCat("parameter ", b.ref);
        break;
      case CheckpointedBinding::Target::kHandle: {
        auto it = targets_.handles.find(b.ref);
        if (it == targets_.handles.end()) {
          return StepCorrupt(
              graph_, step_,
              absl::StrCat(what, ": handle ", b.ref, " is not a handle of the session"));
        }
        slice = it->second.slice;
        size = it->second.size;
        target = absl::StrCat("handle ", b.ref);
        break;
      }
      case CheckpointedBinding::Target::kOrphan:
        if (b.ref >= targets_.orphans.size()) {
          return StepCorrupt(
              graph_, step_,
              absl::StrCat(what, ": orphan ", b.ref, " of ", targets_.orphans.size()));
        }
        slice = targets_.orphans[b.ref].slice;
        size = targets_.orphans[b.ref].size;
        target = absl::StrCat("orphan ", b.ref);
        break;
    }
    const std::optional<uint64_t> end = CheckedAdd(b.offset, b.size);
    if (!end || *end > size) {
      return StepCorrupt(graph_, step_,
                         absl::StrCat(what, ": bytes [", b.offset, ", +", b.size, ") exceed the ",
                                      size, " bytes of ", target));
    }
    if (b.target != CheckpointedBinding::Target::kParameter) held_.push_back(slice);
    return ResolvedBinding{slice, b.offset, b.size};
  }

  absl::Span<const ParameterUse> uses() const { return uses_; }
  absl::Span<const SliceId> held() const { return held_; }

 private:
  const CheckpointedGraph& graph_;
  const size_t step_;
  const GraphTargets& targets_;
  absl::InlinedVector<ParameterUse, 4> uses_;
  absl::InlinedVector<SliceId, 4> held_;
};

// Step `i` of `graph` as a launch over `targets`, checked as recording checks an execute.
absl::StatusOr<Launch> RestoreStep(CheckpointedGraph& graph, size_t i, StepResolver& resolver,
                                   const DeviceDescription& device, bool allow_unchecked) {
  CheckpointedStep& step = graph.steps[i];
  if (step.unchecked && !allow_unchecked) {
    return absl::PermissionDeniedError(
        absl::StrCat("graph ", graph.id.value(), " step ", i,
                     ": an unchecked execute, which this daemon does not allow (start it with "
                     "--allow_unchecked)"));
  }
  Launch launch;
  launch.unchecked = step.unchecked;
  launch.count.dynamic = step.dynamic_count;
  if (step.dynamic_count) {
    ASSIGN_OR_RETURN(
        launch.count.binding,
        resolver.Resolve(step.count_binding, ParameterUse::kCountBinding, "dynamic count"));
    if (launch.count.binding.size < 12) {
      return StepCorrupt(graph, i,
                         absl::StrCat("the dynamic count binds ", launch.count.binding.size,
                                      " bytes; it needs 12"));
    }
  } else {
    for (int d = 0; d < 3; ++d) {
      if (step.count[d] == 0 || step.count[d] > device.max_cube_count[d]) {
        return StepCorrupt(
            graph, i,
            absl::StrCat("static count ", std::string(1, "xyz"[d]), " = ", step.count[d],
                         " is outside 1 .. ", device.max_cube_count[d]));
      }
    }
    launch.count.x = step.count[0];
    launch.count.y = step.count[1];
    launch.count.z = step.count[2];
  }
  for (size_t b = 0; b < step.buffers.size(); ++b) {
    ASSIGN_OR_RETURN(ResolvedBinding r, resolver.Resolve(step.buffers[b], static_cast<uint32_t>(b),
                                                         absl::StrCat("buffer ", b)));
    launch.buffers.push_back(r);
  }
  if (step.kernel.is_builtin) {
    absl::InlinedVector<uint64_t, kernels::kMaxBuiltinBuffers> sizes;
    for (const ResolvedBinding& r : launch.buffers) sizes.push_back(r.size);
    if (absl::Status s = kernels::ValidateBuiltin(step.kernel.builtin, sizes); !s.ok()) {
      return StepCorrupt(graph, i, s.message());
    }
  }
  launch.kernel = std::move(step.kernel);
  return launch;
}

}  // namespace

absl::StatusOr<CheckpointedGraph> CaptureGraph(const RecordedGraph& graph,
                                               const SliceNames& names) {
  CheckpointedGraph c;
  c.id = graph.id();
  c.parameters.assign(graph.parameters().begin(), graph.parameters().end());
  for (size_t i = 0; i < graph.parameter_count(); ++i) {
    c.parameter_sizes.push_back(graph.parameter_size(i));
    if (graph.writes_parameter(i)) c.written.push_back(static_cast<uint32_t>(i));
  }
  absl::flat_hash_map<Position, uint32_t> parameters;
  for (const ParameterUse& use : graph.uses()) parameters[{use.step, use.buffer}] = use.parameter;
  auto name = [&](uint32_t step, uint32_t position,
                  const ResolvedBinding& b) -> absl::StatusOr<CheckpointedBinding> {
    CheckpointedBinding out;
    if (auto it = parameters.find(Position{step, position}); it != parameters.end()) {
      out.target = CheckpointedBinding::Target::kParameter;
      out.ref = it->second;
    } else if (auto n = names.find(b.slice); n != names.end()) {
      out.target = n->second.target;
      out.ref = n->second.ref;
    } else {
      return absl::InternalError(absl::StrCat("checkpoint: graph ", graph.id().value(), " step ",
                                              step, " binds slice ", b.slice,
                                              ", which is neither a handle's nor held"));
    }
    out.offset = b.offset;
    out.size = b.size;
    return out;
  };
  const absl::Span<const Launch> launches = graph.launches();
  c.steps.reserve(launches.size());
  for (uint32_t i = 0; i < launches.size(); ++i) {
    const Launch& launch = launches[i];
    CheckpointedStep& step = c.steps.emplace_back();
    step.kernel = launch.kernel;
    step.unchecked = launch.unchecked;
    step.dynamic_count = launch.count.dynamic;
    if (launch.count.dynamic) {
      ASSIGN_OR_RETURN(step.count_binding,
                       name(i, ParameterUse::kCountBinding, launch.count.binding));
    } else {
      step.count[0] = launch.count.x;
      step.count[1] = launch.count.y;
      step.count[2] = launch.count.z;
    }
    for (uint32_t b = 0; b < launch.buffers.size(); ++b) {
      ASSIGN_OR_RETURN(step.buffers.emplace_back(), name(i, b, launch.buffers[b]));
    }
  }
  return c;
}

absl::StatusOr<std::unique_ptr<RecordedGraph>> RestoreGraph(CheckpointedGraph graph,
                                                            const GraphTargets& targets,
                                                            const DeviceDescription& device,
                                                            bool allow_unchecked) {
  RETURN_IF_ERROR(CheckParameters(graph));
  auto restored =
      std::make_unique<RecordedGraph>(graph.id, graph.parameters, graph.parameter_sizes);
  for (size_t i = 0; i < graph.steps.size(); ++i) {
    StepResolver resolver(graph, i, targets);
    ASSIGN_OR_RETURN(Launch launch, RestoreStep(graph, i, resolver, device, allow_unchecked));
    for (SliceId slice : resolver.held()) restored->AddHeld(slice);
    restored->AddStep(
        std::move(launch), resolver.uses(),
        i == 0 ? absl::Span<const uint32_t>(graph.written) : absl::Span<const uint32_t>());
    if (restored->bytes() > kMaxGraphBytes) {
      return StepCorrupt(graph, i,
                         absl::StrCat("the graph takes more than ", kMaxGraphBytes,
                                      " bytes of daemon memory, the most a session's graphs may"));
    }
  }
  return restored;
}

}  // namespace cubed
