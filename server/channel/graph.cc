#include "server/channel/graph.h"

#include <algorithm>
#include <utility>

namespace cubed {

uint64_t LaunchBytes(const Launch& launch) {
  const KernelCall& k = launch.Kernel();
  uint64_t bytes = sizeof(Launch) + k.builtin.name.size() +
                   k.builtin.metadata.size() * sizeof(uint32_t) + k.cuda.code.size() +
                   k.cuda.entry_point.size() + launch.buffers.size() * sizeof(ResolvedBinding);
  for (const kernels::ScalarGroup& g : k.builtin.scalars) bytes += sizeof(g) + g.bytes.size();
  for (const std::string& o : k.cuda.options) bytes += sizeof(o) + o.size();
  return bytes;
}

RecordedGraph::RecordedGraph(GraphId id, std::vector<HandleId> parameters,
                             std::vector<uint64_t> parameter_sizes)
    : id_(id),
      parameters_(std::move(parameters)),
      parameter_sizes_(std::move(parameter_sizes)),
      written_(parameters_.size(), false),
      bytes_(sizeof(RecordedGraph) + parameters_.size() * (2 * sizeof(uint64_t) + 1)) {}

int RecordedGraph::ParameterIndex(HandleId handle) const {
  auto it = std::find(parameters_.begin(), parameters_.end(), handle);
  return it == parameters_.end() ? -1 : static_cast<int>(it - parameters_.begin());
}

void RecordedGraph::AddStep(Launch launch, absl::Span<const ParameterUse> uses,
                            absl::Span<const uint32_t> writes) {
  if (launch.borrowed != nullptr) {  // A step outlives the command that lent its kernel.
    launch.kernel = *launch.borrowed;
    launch.borrowed = nullptr;
  }
  const uint32_t step = static_cast<uint32_t>(launches_.size());
  for (ParameterUse use : uses) {
    use.step = step;
    uses_.push_back(use);
  }
  for (uint32_t p : writes) written_[p] = true;
  bytes_ += LaunchBytes(launch) + uses.size() * sizeof(ParameterUse);
  launches_.push_back(std::move(launch));
}

void RecordedGraph::Bind(absl::Span<const SliceId> slices) {
  for (const ParameterUse& use : uses_) {
    Launch& launch = launches_[use.step];
    ResolvedBinding& binding = use.buffer == ParameterUse::kCountBinding
                                   ? launch.count.binding
                                   : launch.buffers[use.buffer];
    binding.slice = slices[use.parameter];
  }
}

}  // namespace cubed
