#include "server/daemon/checkpoint_graphs.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/elem_type.h"
#include "common/status_macros.h"

namespace cubed {
namespace {

void SetCubeDim(const uint32_t (&dim)[3], v1::CubeDim* out) {
  out->set_x(dim[0]);
  out->set_y(dim[1]);
  out->set_z(dim[2]);
}

v1::ElemType WireType(ElemType t) { return static_cast<v1::ElemType>(t); }

// The kernel as an execute would carry it; ToExecuteCommand turns it back into `kernel`.
void KernelToManifest(const KernelCall& kernel, v1::Kernel* out) {
  if (kernel.is_builtin) {
    v1::BuiltinKernel* b = out->mutable_builtin();
    b->set_name(kernel.builtin.name);
    b->set_dtype(WireType(kernel.builtin.dtype));
    b->set_out_dtype(WireType(kernel.builtin.out_dtype));
    b->set_axis(kernel.builtin.axis);
    b->set_index_dtype(WireType(kernel.builtin.index_dtype));
    b->set_allow_tf32(kernel.builtin.allow_tf32);
  } else if (kernel.cuda.is_ptx) {
    v1::PtxKernel* p = out->mutable_ptx();
    p->set_ptx(kernel.cuda.code);
    p->set_entry_point(kernel.cuda.entry_point);
    SetCubeDim(kernel.cuda.cube_dim, p->mutable_cube_dim());
    p->set_shared_memory_bytes(kernel.cuda.shared_memory_bytes);
  } else {
    v1::CudaSourceKernel* c = out->mutable_cuda_source();
    c->set_source(kernel.cuda.code);
    c->set_entry_point(kernel.cuda.entry_point);
    SetCubeDim(kernel.cuda.cube_dim, c->mutable_cube_dim());
    c->set_shared_memory_bytes(kernel.cuda.shared_memory_bytes);
    for (const std::string& o : kernel.cuda.options) c->add_options(o);
  }
}

void BindingToManifest(const CheckpointedBinding& b, v1::CheckpointBinding* out) {
  switch (b.target) {
    case CheckpointedBinding::Target::kHandle:
      out->set_handle(b.ref);
      break;
    case CheckpointedBinding::Target::kOrphan:
      out->set_orphan(static_cast<uint32_t>(b.ref));
      break;
    case CheckpointedBinding::Target::kParameter:
      out->set_parameter(static_cast<uint32_t>(b.ref));
      break;
  }
  out->set_offset(b.offset);
  out->set_size(b.size);
}

absl::StatusOr<CheckpointedBinding> BindingFromManifest(const v1::CheckpointBinding& in,
                                                        absl::string_view what) {
  CheckpointedBinding b;
  switch (in.target_case()) {
    case v1::CheckpointBinding::kHandle:
      b.target = CheckpointedBinding::Target::kHandle;
      b.ref = in.handle();
      break;
    case v1::CheckpointBinding::kOrphan:
      b.target = CheckpointedBinding::Target::kOrphan;
      b.ref = in.orphan();
      break;
    case v1::CheckpointBinding::kParameter:
      b.target = CheckpointedBinding::Target::kParameter;
      b.ref = in.parameter();
      break;
    case v1::CheckpointBinding::TARGET_NOT_SET:
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": no target (handle, orphan or parameter)"));
  }
  b.offset = in.offset();
  b.size = in.size();
  return b;
}

// Scalars as the daemon holds them: whole elements of a known type, each type once.
absl::Status ScalarsFromManifest(const v1::CheckpointStep& in, KernelCall& kernel) {
  kernels::ScalarGroups& groups = kernel.builtin.scalars;
  for (int i = 0; i < in.scalars_size(); ++i) {
    const v1::CheckpointScalars& s = in.scalars(i);
    const std::string field = absl::StrCat("scalars[", i, "]");
    ASSIGN_OR_RETURN(const ElemType elem, ElemTypeFromWire(s.elem(), field + ".elem"));
    if (std::any_of(groups.begin(), groups.end(),
                    [elem](const kernels::ScalarGroup& g) { return g.elem == elem; })) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": a second group of ", ElemTypeName(elem)));
    }
    const std::string& bytes = s.bytes();
    if (bytes.size() % ElemSize(elem) != 0 ||
        (elem == ElemType::kBool &&
         std::any_of(bytes.begin(), bytes.end(), [](char c) { return c != 0 && c != 1; }))) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": ", bytes.size(), " bytes are not whole ", ElemTypeName(elem),
                       " elements", elem == ElemType::kBool ? " of 0 or 1" : ""));
    }
    groups.push_back(kernels::ScalarGroup{elem, kernels::ScalarBytes(bytes.begin(), bytes.end())});
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointedStep> StepFromManifest(const v1::CheckpointStep& in,
                                                  const RequestLimits& limits) {
  // The kernel, metadata, count and mode through the edge's own conversion; the count's binding
  // and the buffers are the checkpoint's, and the scalars are held bytes, not wire values.
  v1::CubeCount count;
  if (in.has_dynamic_count()) {
    count.mutable_dynamic();
  } else {
    *count.mutable_static_count() = in.static_count();
  }
  v1::Bindings bindings;
  *bindings.mutable_metadata() = in.metadata();
  ExecuteCommand command;
  RETURN_IF_ERROR(ToExecuteCommand(
      in.kernel(), count, bindings,
      in.unchecked() ? v1::EXECUTION_MODE_UNCHECKED : v1::EXECUTION_MODE_CHECKED, limits, command));
  if (static_cast<uint32_t>(in.buffers_size()) > limits.max_buffers) {
    return absl::InvalidArgumentError(
        absl::StrCat("buffers: ", in.buffers_size(), "; at most ", limits.max_buffers));
  }
  CheckpointedStep step;
  step.kernel = std::move(command.kernel);
  RETURN_IF_ERROR(ScalarsFromManifest(in, step.kernel));
  step.unchecked = command.unchecked;
  step.dynamic_count = command.dynamic_count;
  std::copy(std::begin(command.count), std::end(command.count), std::begin(step.count));
  if (in.has_dynamic_count()) {
    ASSIGN_OR_RETURN(step.count_binding, BindingFromManifest(in.dynamic_count(), "dynamic_count"));
  }
  step.buffers.reserve(in.buffers_size());
  for (int b = 0; b < in.buffers_size(); ++b) {
    ASSIGN_OR_RETURN(step.buffers.emplace_back(),
                     BindingFromManifest(in.buffers(b), absl::StrCat("buffers[", b, "]")));
  }
  return step;
}

}  // namespace

void GraphToManifest(const CheckpointedGraph& graph, v1::CheckpointGraph* out) {
  out->set_id(graph.id.value());
  for (HandleId p : graph.parameters) out->add_parameters(p.value());
  for (uint64_t size : graph.parameter_sizes) out->add_parameter_sizes(size);
  for (uint32_t w : graph.written) out->add_written(w);
  for (const CheckpointedStep& step : graph.steps) {
    v1::CheckpointStep* s = out->add_steps();
    KernelToManifest(step.kernel, s->mutable_kernel());
    for (uint32_t word : step.kernel.builtin.metadata) s->add_metadata(word);
    for (const kernels::ScalarGroup& g : step.kernel.builtin.scalars) {
      v1::CheckpointScalars* scalars = s->add_scalars();
      scalars->set_elem(WireType(g.elem));
      scalars->set_bytes(std::string(g.bytes.begin(), g.bytes.end()));
    }
    if (step.dynamic_count) {
      BindingToManifest(step.count_binding, s->mutable_dynamic_count());
    } else {
      s->mutable_static_count()->set_x(step.count[0]);
      s->mutable_static_count()->set_y(step.count[1]);
      s->mutable_static_count()->set_z(step.count[2]);
    }
    for (const CheckpointedBinding& b : step.buffers) BindingToManifest(b, s->add_buffers());
    s->set_unchecked(step.unchecked);
  }
}

void RecordingToManifest(const CheckpointedRecording& recording, size_t max_message,
                         v1::CheckpointRecording* out) {
  if (recording.graph.has_value()) {
    GraphToManifest(*recording.graph, out->mutable_graph());
    return;
  }
  out->set_failure_code(static_cast<uint32_t>(recording.failure.code()));
  out->set_failure_message(std::string(recording.failure.message().substr(0, max_message)));
}

absl::StatusOr<CheckpointedGraph> GraphFromManifest(const v1::CheckpointGraph& in,
                                                    const RequestLimits& limits) {
  CheckpointedGraph graph;
  graph.id = GraphId(in.id());
  for (uint64_t p : in.parameters()) graph.parameters.push_back(HandleId(p));
  graph.parameter_sizes.assign(in.parameter_sizes().begin(), in.parameter_sizes().end());
  graph.written.assign(in.written().begin(), in.written().end());
  graph.steps.reserve(in.steps_size());
  for (int i = 0; i < in.steps_size(); ++i) {
    absl::StatusOr<CheckpointedStep> step = StepFromManifest(in.steps(i), limits);
    if (!step.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph ", in.id(), " step ", i, ": ", step.status().message()));
    }
    graph.steps.push_back(*std::move(step));
  }
  return graph;
}

absl::StatusOr<CheckpointedRecording> RecordingFromManifest(const v1::CheckpointRecording& in,
                                                            const RequestLimits& limits,
                                                            size_t max_message) {
  CheckpointedRecording recording;
  if (in.failure_code() == 0) {
    if (!in.has_graph()) {
      return absl::InvalidArgumentError("recording: neither a graph nor a failure");
    }
    ASSIGN_OR_RETURN(recording.graph.emplace(), GraphFromManifest(in.graph(), limits));
    return recording;
  }
  if (in.has_graph() || in.failure_code() > 16 || in.failure_message().size() > max_message) {
    return absl::InvalidArgumentError(absl::StrCat(
        "recording: failure code ", in.failure_code(), " (1 .. 16), a message of ",
        in.failure_message().size(), " bytes, and ", in.has_graph() ? "a graph too" : "no graph"));
  }
  recording.failure =
      absl::Status(static_cast<absl::StatusCode>(in.failure_code()), in.failure_message());
  return recording;
}

}  // namespace cubed
