// Client: recorded graphs on the session stream (docs/api.md, "Recorded graphs").

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/client_impl.h"
#include "common/status_macros.h"

namespace cubed {
namespace {

absl::Status NeedsStream(const std::unique_ptr<StreamTransport>& stream) {
  if (stream == nullptr) {
    return absl::FailedPreconditionError(
        "recorded graphs need the session stream (this client uses unary calls)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Client::BeginGraph(const std::vector<Handle>& parameters) {
  RETURN_IF_ERROR(NeedsStream(impl_->stream));
  Impl::GraphRecording recording;
  v1::Command command;
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (!parameters[i]) {
      return absl::InvalidArgumentError(absl::StrCat("parameters[", i, "] is an empty handle"));
    }
    command.mutable_begin_graph()->add_parameters(parameters[i].id());
    recording.parameter_sizes.push_back(parameters[i].size());
  }
  absl::MutexLock lock(&impl_->graph_mu);
  if (impl_->recording.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("graph ", impl_->recording->id,
                     " is still recording (graphs do not nest: EndGraph first)"));
  }
  recording.id = impl_->next_graph_id++;
  command.mutable_begin_graph()->set_graph(recording.id);
  RETURN_IF_ERROR(impl_->stream->Send(std::move(command)));
  impl_->recording = std::move(recording);
  return absl::OkStatus();
}

absl::StatusOr<Graph> Client::EndGraph() {
  RETURN_IF_ERROR(NeedsStream(impl_->stream));
  Impl::GraphRecording recording;
  {
    absl::MutexLock lock(&impl_->graph_mu);
    if (!impl_->recording.has_value()) {
      return absl::FailedPreconditionError("EndGraph: no graph is recording (BeginGraph first)");
    }
    recording = *std::move(impl_->recording);
    impl_->recording.reset();
  }
  v1::Command command;
  command.mutable_end_graph();
  return Await(impl_->Ask<absl::StatusOr<Graph>>(
      std::move(command), [&recording](absl::StatusOr<v1::Reply*> reply) -> absl::StatusOr<Graph> {
        RETURN_IF_ERROR(ReplyStatus(reply));
        return Graph{recording.id, (*reply)->graph_steps(), std::move(recording.parameter_sizes)};
      }));
}

absl::Status Client::ReplayGraph(const Graph& graph, const std::vector<Handle>& bindings) {
  RETURN_IF_ERROR(NeedsStream(impl_->stream));
  if (bindings.size() != graph.parameter_sizes.size()) {
    return absl::InvalidArgumentError(absl::StrCat("bindings: ", bindings.size(), " given; graph ",
                                                   graph.id, " has ", graph.parameter_sizes.size(),
                                                   " parameters"));
  }
  v1::Command command;
  v1::Command::ReplayGraph* replay = command.mutable_replay_graph();
  replay->set_graph(graph.id);
  for (size_t i = 0; i < bindings.size(); ++i) {
    if (bindings[i].size() != graph.parameter_sizes[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat("bindings[", i, "]: the handle holds ", bindings[i].size(),
                       " bytes; parameter ", i, " was recorded with ", graph.parameter_sizes[i]));
    }
    replay->add_bindings(bindings[i].id());
  }
  return impl_->stream->Send(std::move(command));
}

absl::Status Client::ReleaseGraph(const Graph& graph) {
  RETURN_IF_ERROR(NeedsStream(impl_->stream));
  v1::Command command;
  command.mutable_release_graph()->set_graph(graph.id);
  return impl_->stream->Send(std::move(command));
}

}  // namespace cubed
