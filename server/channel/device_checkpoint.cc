// Device: capture and restore of sessions (Note [Checkpoint and restore], device.h).

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/channel/device.h"
#include "server/channel/graph_checkpoint.h"

namespace cubed {
namespace {

// Rebuilds the graphs and the recording of `c` in `s`, whose handles and orphans (`orphans`,
// accounted and marked as orphans) are restored (Note [Checkpointed graphs]); then every orphan
// must be held by a graph. On error the caller frees the session, and with it what was added.
absl::Status RestoreGraphs(const DeviceDescription& device, bool allow_unchecked, Session& s,
                           CheckpointedSession& c, const std::vector<SliceId>& orphans) {
  GraphTargets targets;
  for (const auto& [id, entry] : s.handles()) {
    targets.handles[id.value()] = GraphTargets::Target{entry.slice, entry.size};
  }
  for (size_t i = 0; i < orphans.size(); ++i) {
    targets.orphans.push_back(GraphTargets::Target{orphans[i], c.orphans[i].size});
  }
  absl::flat_hash_set<SliceId> held;
  auto restore = [&](CheckpointedGraph g) -> absl::StatusOr<std::unique_ptr<RecordedGraph>> {
    const uint64_t id = g.id.value();
    if (s.FindGraph(g.id) != nullptr) {
      return absl::DataLossError(absl::StrCat("graph ", id, " appears twice"));
    }
    ASSIGN_OR_RETURN(std::unique_ptr<RecordedGraph> graph,
                     RestoreGraph(std::move(g), targets, device, allow_unchecked));
    if (s.graph_bytes() + graph->bytes() > kMaxGraphBytes) {
      return absl::DataLossError(absl::StrCat("graph ", id,
                                              ": the session's graphs take more than ",
                                              kMaxGraphBytes, " bytes of daemon memory"));
    }
    s.AddGraphBytes(graph->bytes());
    for (SliceId slice : graph->held()) {
      s.HoldSlice(slice);
      held.insert(slice);
    }
    return graph;
  };
  if (c.graphs.size() > kMaxGraphs) {
    return absl::DataLossError(
        absl::StrCat(c.graphs.size(), " graphs; a session holds at most ", kMaxGraphs));
  }
  for (CheckpointedGraph& g : c.graphs) {
    ASSIGN_OR_RETURN(std::unique_ptr<RecordedGraph> graph, restore(std::move(g)));
    s.AddGraph(std::move(graph));
  }
  if (c.recording.has_value()) {
    auto recording = std::make_unique<GraphRecording>();
    if (c.recording->graph.has_value()) {
      ASSIGN_OR_RETURN(recording->graph, restore(*std::move(c.recording->graph)));
    } else if (c.recording->failure.ok()) {
      return absl::DataLossError("a graph recording with neither a graph nor a failure");
    } else {
      recording->failure = std::move(c.recording->failure);
    }
    s.recording() = std::move(recording);
  }
  for (size_t i = 0; i < orphans.size(); ++i) {
    if (!held.contains(orphans[i])) {
      return absl::DataLossError(
          absl::StrCat("orphan ", i, " (", c.orphans[i].size, " bytes) is held by no graph"));
    }
  }
  return absl::OkStatus();
}

// Recreates the handles (bytes from `source`) and poisons of `c` in `s`, which is empty. On
// error the caller frees the session, and with it whatever was added.
absl::Status RestoreContents(ComputeServer& server, bool allow_unchecked, SessionTable& table,
                             Session& s, CheckpointedSession& c, CheckpointSource& source) {
  std::vector<uint64_t> sizes;
  sizes.reserve(c.handles.size() + c.orphans.size());
  absl::flat_hash_set<uint64_t> ids;
  for (const CheckpointedHandle& h : c.handles) {
    if (h.id.value() == 0 || !ids.insert(h.id.value()).second) {
      return absl::InvalidArgumentError(absl::StrCat("session ", c.id.value(), ": handle id ",
                                                     h.id.value(), " is 0 or appears twice"));
    }
    if (h.size == 0 || h.refcount == 0) {
      return absl::InvalidArgumentError(absl::StrCat("session ", c.id.value(), ": handle ",
                                                     h.id.value(), " has size ", h.size,
                                                     " and refcount ", h.refcount));
    }
    sizes.push_back(h.size);
  }
  for (size_t i = 0; i < c.orphans.size(); ++i) {
    if (c.orphans[i].size == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("session ", c.id.value(), ": orphan ", i, " has size 0"));
    }
    sizes.push_back(c.orphans[i].size);
  }
  ASSIGN_OR_RETURN(
      std::vector<Allocation> allocations,
      server.CreateFromHost(sizes, s.memory_owner(), [&source](absl::Span<const HostChunk> chunks) {
        return source.Fill(chunks);
      }));
  absl::Status status = source.Finish();
  for (size_t i = 0; i < allocations.size() && status.ok(); ++i) {
    if (allocations[i].size != sizes[i]) {
      status = absl::InternalError(
          absl::StrCat(i < c.handles.size() ? "handle " : "orphan ",
                       i < c.handles.size() ? c.handles[i].id.value() : i - c.handles.size(),
                       ": allocated ", allocations[i].size, " bytes for ", sizes[i]));
    }
  }
  if (!status.ok()) {
    for (const Allocation& a : allocations) server.Free(a.slice);
    return status;
  }
  for (size_t i = 0; i < c.handles.size(); ++i) {
    const CheckpointedHandle& h = c.handles[i];
    s.AddHandleWithId(h.id, allocations[i].slice, h.size);
    s.Find(h.id)->refcount = h.refcount;
    table.Account(s, h.size, +1);
  }
  // Orphans at once, so that freeing the session frees them whatever fails next.
  std::vector<SliceId> orphans;
  for (size_t i = 0; i < c.orphans.size(); ++i) {
    const Allocation& a = allocations[c.handles.size() + i];
    s.Orphan(a.slice, c.orphans[i].size);
    table.Account(s, c.orphans[i].size, +1);
    orphans.push_back(a.slice);
  }
  *s.stream_seq() = c.stream_seq;
  for (CheckpointedPoison& p : c.poisons) {
    if (p.id.value() == 0 || p.error.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("session ", c.id.value(), ": poisoned id ",
                                                     p.id.value(), " is 0 or has no error"));
    }
    p.error.SetPayload(kPoisonPayload, absl::Cord("1"));  // Note [Poisoned handles].
    s.Poison(p.id, std::move(p.error));
  }
  return RestoreGraphs(server.Description(), allow_unchecked, s, c, orphans);
}

}  // namespace

absl::StatusOr<std::vector<CheckpointedSession>> Device::CaptureTables() const {
  std::vector<CheckpointedSession> sessions;
  for (SessionId id : sessions_.ids()) {
    const Session& s = *sessions_.Get(id);
    CheckpointedSession c;
    c.id = id;
    c.device = index_;
    c.owner_name = s.owner() != nullptr ? s.owner()->name : "";
    c.lease = s.lease();
    c.stream_seq = *s.stream_seq();
    SliceNames names;  // Note [Checkpointed graphs].
    for (const auto& [handle, entry] : s.handles()) {
      c.handles.push_back(
          CheckpointedHandle{handle, entry.size, entry.refcount, IsImportedSlice(entry.slice)});
      names[entry.slice] =
          CheckpointedBinding{CheckpointedBinding::Target::kHandle, handle.value(), 0, 0};
    }
    for (const auto& [handle, error] : s.poisons()) {
      c.poisons.push_back(CheckpointedPoison{handle, error});
    }
    for (const auto& [slice, size] : s.Orphans()) {
      names[slice] =
          CheckpointedBinding{CheckpointedBinding::Target::kOrphan, c.orphans.size(), 0, 0};
      c.orphans.push_back(CheckpointedOrphan{size, slice});
    }
    for (const auto& [graph_id, graph] : s.graphs()) {
      ASSIGN_OR_RETURN(c.graphs.emplace_back(), CaptureGraph(*graph, names));
    }
    if (const GraphRecording* recording = s.recording(); recording != nullptr) {
      CheckpointedRecording& r = c.recording.emplace();
      r.failure = recording->failure;
      if (recording->graph != nullptr) {
        ASSIGN_OR_RETURN(r.graph.emplace(), CaptureGraph(*recording->graph, names));
      }
    }
    sessions.push_back(std::move(c));
  }
  return sessions;
}

absl::StatusOr<std::vector<CheckpointedSession>> Device::Capture(HostChunkCallback sink) {
  ASSIGN_OR_RETURN(std::vector<CheckpointedSession> sessions, CaptureTables());
  std::vector<ResolvedBinding> bindings;
  for (const CheckpointedSession& c : sessions) {
    Session& s = *sessions_.Get(c.id);
    for (const CheckpointedHandle& h : c.handles) {
      bindings.push_back(ResolvedBinding{s.Find(h.id)->slice, 0, h.size});
    }
    for (const CheckpointedOrphan& o : c.orphans) {
      bindings.push_back(ResolvedBinding{o.slice, 0, o.size});
    }
  }
  RETURN_IF_ERROR(server_->ReadToHost(bindings, sink));
  return sessions;
}

std::shared_ptr<uint64_t> Device::StreamSeqOf(SessionId session) const {
  const Session* s = sessions_.Get(session);
  return s == nullptr ? nullptr : s->stream_seq();
}

absl::StatusOr<absl::Duration> Device::TakeResumable(SessionId session, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  if (!s->resumable()) {
    return absl::FailedPreconditionError(
        absl::StrCat("open.resume_session: session ", session.value(),
                     " was not restored from a checkpoint, or a stream resumed it already"));
  }
  s->set_resumable(false);
  return s->lease();
}

absl::Status Device::RestoreSession(CheckpointedSession session, CheckpointSource& source,
                                    absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, sessions_.Restore(session.id, session.lease, now, session.owner));
  if (absl::Status status =
          RestoreContents(*server_, options_.allow_unchecked, sessions_, *s, session, source);
      !status.ok()) {
    Free(*sessions_.Remove(session.id));
    return status;
  }
  s->set_resumable(true);
  return absl::OkStatus();
}

}  // namespace cubed
