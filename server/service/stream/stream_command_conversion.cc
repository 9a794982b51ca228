#include "server/service/stream/stream_command_conversion.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/channel/graph.h"

namespace cubed {
namespace {

using Kind = StreamCommand::Kind;

absl::Status CheckTensor(absl::Span<const uint64_t> shape, uint32_t elem_size,
                         absl::string_view field, const std::string* data) {
  ASSIGN_OR_RETURN(uint64_t bytes, CheckTensorShape(shape, elem_size, field));
  if (data != nullptr && data->size() != bytes) {
    return absl::InvalidArgumentError(absl::StrCat("data: ", data->size(),
                                                   " bytes given, but shape and elem_size need ",
                                                   bytes, " (product(shape) * elem_size)"));
  }
  return absl::OkStatus();
}

absl::Status ConvertExecute(const v1::Command::Execute& e, const RequestLimits& limits,
                            StreamCommand& out) {
  // The execute writes these (Note [Poisoned handles], session.h); known even when the rest of
  // the command is malformed.
  const auto& buffers = e.bindings().buffers();
  switch (e.kernel().kind_case()) {
    case v1::Kernel::kBuiltin:
      if (!buffers.empty()) out.outputs.emplace_back(buffers.rbegin()->handle());
      break;
    case v1::Kernel::KIND_NOT_SET:  // No kernel: nothing would be written.
      break;
    default:  // A client kernel may write any buffer.
      out.outputs.reserve(buffers.size());
      for (const v1::Binding& b : buffers) out.outputs.emplace_back(b.handle());
      break;
  }
  // Converted in place from the command's parts: no temporary ExecuteRequest (whose Swap would
  // deep-copy across arenas; Note [Request arena], request_arena.h).
  return ToExecuteCommand(e.kernel(), e.count(), e.bindings(), e.mode(), limits, out.execute);
}

RegionRange ToRegionRange(const v1::RegionSlice& slice) {
  return RegionRange{RegionId(slice.region()), slice.offset(), slice.size()};
}

// A region create (Note [Shared-memory regions]): `data` empty and not bulk; the range's size is
// the allocation's (`expected`, when the shape gives it, must match).
absl::Status ConvertRegionCreate(const v1::RegionSlice& slice, std::optional<uint64_t> expected,
                                 StreamCommand& out) {
  if (out.bulk || !out.data.empty()) {
    return absl::InvalidArgumentError(
        "region: given with data or bulk; a create takes its bytes from one of them only");
  }
  if (slice.size() == 0) return absl::InvalidArgumentError("region.size: 0; need at least 1 byte");
  if (expected.has_value() && *expected != slice.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("region.size: ", slice.size(), " bytes for a tensor of ", *expected));
  }
  out.region = ToRegionRange(slice);
  out.size = slice.size();
  return absl::OkStatus();
}

// A region read: not bulk; the range is checked against the region when the read runs.
absl::Status ConvertRegionRead(const v1::RegionSlice& slice, StreamCommand& out) {
  if (out.bulk) {
    return absl::InvalidArgumentError("into: given with bulk; a read goes to one of them only");
  }
  if (slice.size() == 0) return absl::InvalidArgumentError("into.size: 0; need at least 1 byte");
  out.region = ToRegionRange(slice);
  return absl::OkStatus();
}

absl::Status Convert(v1::Command& c, const RequestLimits& limits, StreamCommand& out) {
  switch (c.kind_case()) {
    case v1::Command::kCreate:
      out.kind = Kind::kCreate;
      out.id = HandleId(c.create().id());
      out.data = std::move(*c.mutable_create()->mutable_data());
      if (c.create().has_region()) {
        out.bulk = c.create().bulk_size() != 0;
        return ConvertRegionCreate(c.create().region(), std::nullopt, out);
      }
      if (c.create().bulk_size() != 0) {
        out.bulk = true;
        out.size = c.create().bulk_size();
        if (!out.data.empty()) {
          return absl::InvalidArgumentError(
              absl::StrCat("data: ", out.data.size(), " bytes given with bulk_size ", out.size,
                           "; a bulk create's bytes come through Upload, data must be empty"));
        }
        return absl::OkStatus();
      }
      if (out.data.empty()) {
        return absl::InvalidArgumentError("data: empty; create needs at least 1 byte");
      }
      return absl::OkStatus();
    case v1::Command::kCreateTensor: {
      out.kind = Kind::kCreateTensor;
      v1::Command::CreateTensor& t = *c.mutable_create_tensor();
      out.id = HandleId(t.id());
      out.data = std::move(*t.mutable_data());
      out.shape.assign(t.shape().begin(), t.shape().end());
      out.elem_size = t.elem_size();
      if (t.has_region()) {
        out.bulk = t.bulk();
        ASSIGN_OR_RETURN(const uint64_t bytes,
                         CheckTensorShape(out.shape, out.elem_size, "create_tensor"));
        return ConvertRegionCreate(t.region(), bytes, out);
      }
      if (t.bulk()) {
        out.bulk = true;
        if (!out.data.empty()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "data: ", out.data.size(),
              " bytes given with bulk; a bulk create's bytes come through Upload, data must be "
              "empty"));
        }
        ASSIGN_OR_RETURN(out.size, CheckTensorShape(out.shape, out.elem_size, "create_tensor"));
        if (out.size == 0) {
          return absl::InvalidArgumentError("create_tensor: a bulk create needs at least 1 byte");
        }
        return absl::OkStatus();
      }
      return CheckTensor(out.shape, out.elem_size, "create_tensor", &out.data);
    }
    case v1::Command::kEmpty:
      out.kind = Kind::kEmpty;
      out.id = HandleId(c.empty().id());
      out.size = c.empty().size();
      if (out.size == 0) {
        return absl::InvalidArgumentError("size: 0; empty needs at least 1 byte");
      }
      return absl::OkStatus();
    case v1::Command::kEmptyTensor:
      out.kind = Kind::kEmptyTensor;
      out.id = HandleId(c.empty_tensor().id());
      out.shape.assign(c.empty_tensor().shape().begin(), c.empty_tensor().shape().end());
      out.elem_size = c.empty_tensor().elem_size();
      return CheckTensor(out.shape, out.elem_size, "empty_tensor", nullptr);
    case v1::Command::kExecute:
      out.kind = Kind::kExecute;
      return ConvertExecute(c.execute(), limits, out);
    case v1::Command::kRelease: {
      out.kind = Kind::kRelease;
      const auto& ids = c.release().ids();
      out.ids.clear();
      out.ids.reserve(ids.size());
      for (uint64_t id : ids) out.ids.emplace_back(id);
      if (ids.empty() || static_cast<uint32_t>(ids.size()) > limits.max_release) {
        return absl::InvalidArgumentError(absl::StrCat(
            "release.ids: ", ids.size(), " given; expected 1 .. ", limits.max_release));
      }
      return absl::OkStatus();
    }
    case v1::Command::kRead: {
      out.kind = Kind::kRead;
      out.bulk = c.read().bulk();
      v1::ReadRequest request;
      request.mutable_bindings()->Swap(c.mutable_read()->mutable_bindings());
      ASSIGN_OR_RETURN(out.read, ToReadBindings(request, limits));
      if (c.read().has_into()) return ConvertRegionRead(c.read().into(), out);
      return absl::OkStatus();
    }
    case v1::Command::kReadTensor: {
      out.kind = Kind::kReadTensor;
      out.bulk = c.read_tensor().bulk();
      v1::ReadTensorRequest request;
      request.mutable_bindings()->Swap(c.mutable_read_tensor()->mutable_bindings());
      ASSIGN_OR_RETURN(out.read_tensor, ToTensorRefs(request, limits));
      if (c.read_tensor().has_into()) return ConvertRegionRead(c.read_tensor().into(), out);
      return absl::OkStatus();
    }
    case v1::Command::kFlush:
      out.kind = Kind::kFlush;
      return absl::OkStatus();
    case v1::Command::kSync:
      out.kind = Kind::kSync;
      return absl::OkStatus();
    case v1::Command::kMemoryUsage:
      out.kind = Kind::kMemoryUsage;
      return absl::OkStatus();
    case v1::Command::kMemoryCleanup:
      out.kind = Kind::kMemoryCleanup;
      return absl::OkStatus();
    case v1::Command::kStartProfile:
      out.kind = Kind::kStartProfile;
      return absl::OkStatus();
    case v1::Command::kEndProfile:
      out.kind = Kind::kEndProfile;
      return absl::OkStatus();
    case v1::Command::kReleaseRegion:
      out.kind = Kind::kReleaseRegion;
      out.region = RegionRange{RegionId(c.release_region().region()), 0, 0};
      return absl::OkStatus();
    case v1::Command::kBeginGraph: {
      out.kind = Kind::kBeginGraph;
      out.graph = GraphId(c.begin_graph().graph());
      const auto& parameters = c.begin_graph().parameters();
      out.ids.clear();
      for (uint64_t id : parameters) out.ids.emplace_back(id);
      return absl::OkStatus();  // Device::BeginGraph checks the rest (it fails the recording).
    }
    case v1::Command::kEndGraph:
      out.kind = Kind::kEndGraph;
      return absl::OkStatus();
    case v1::Command::kReplayGraph: {
      out.kind = Kind::kReplayGraph;
      out.graph = GraphId(c.replay_graph().graph());
      const auto& bindings = c.replay_graph().bindings();
      if (static_cast<size_t>(bindings.size()) > kMaxGraphParameters) {
        return absl::InvalidArgumentError(absl::StrCat("replay_graph.bindings: ", bindings.size(),
                                                       " given; at most ", kMaxGraphParameters));
      }
      out.ids.clear();
      for (uint64_t id : bindings) out.ids.emplace_back(id);
      return absl::OkStatus();
    }
    case v1::Command::kReleaseGraph:
      out.kind = Kind::kReleaseGraph;
      out.graph = GraphId(c.release_graph().graph());
      return absl::OkStatus();
    case v1::Command::KIND_NOT_SET:
      break;
  }
  out.kind = Kind::kNone;
  return absl::InvalidArgumentError(
      "command: no kind set (create, create_tensor, empty, empty_tensor, execute, release, read, "
      "read_tensor, flush, sync, memory_usage, memory_cleanup, start_profile, end_profile, "
      "release_region, begin_graph, end_graph, replay_graph or release_graph)");
}

}  // namespace

void ToStreamCommand(v1::Command& command, const RequestLimits& limits, StreamCommand& out) {
  out.seq = command.seq();
  out.invalid = Convert(command, limits, out);
}

}  // namespace cubed
