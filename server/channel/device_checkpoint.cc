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

namespace cubed {
namespace {

// Recreates the handles (bytes from `source`) and poisons of `c` in `s`, which is empty. On
// error the caller frees the session, and with it whatever was added.
absl::Status RestoreContents(ComputeServer& server, SessionTable& table, Session& s,
                             CheckpointedSession& c, CheckpointSource& source) {
  std::vector<uint64_t> sizes;
  sizes.reserve(c.handles.size());
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
  ASSIGN_OR_RETURN(
      std::vector<Allocation> allocations,
      server.CreateFromHost(sizes, s.memory_owner(), [&source](absl::Span<const HostChunk> chunks) {
        return source.Fill(chunks);
      }));
  absl::Status status = source.Finish();
  for (size_t i = 0; i < allocations.size() && status.ok(); ++i) {
    if (allocations[i].size != sizes[i]) {
      status = absl::InternalError(absl::StrCat("handle ", c.handles[i].id.value(), ": allocated ",
                                                allocations[i].size, " bytes for ", sizes[i]));
    }
  }
  if (!status.ok()) {
    for (const Allocation& a : allocations) server.Free(a.slice);
    return status;
  }
  for (size_t i = 0; i < allocations.size(); ++i) {
    const CheckpointedHandle& h = c.handles[i];
    s.AddHandleWithId(h.id, allocations[i].slice, h.size);
    s.Find(h.id)->refcount = h.refcount;
    table.Account(s, h.size, +1);
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
  return absl::OkStatus();
}

}  // namespace

std::vector<CheckpointedSession> Device::CaptureTables() const {
  std::vector<CheckpointedSession> sessions;
  for (SessionId id : sessions_.ids()) {
    const Session& s = *sessions_.Get(id);
    CheckpointedSession c;
    c.id = id;
    c.device = index_;
    c.owner_name = s.owner() != nullptr ? s.owner()->name : "";
    c.lease = s.lease();
    c.stream_seq = *s.stream_seq();
    for (const auto& [handle, entry] : s.handles()) {
      c.handles.push_back(CheckpointedHandle{handle, entry.size, entry.refcount});
    }
    for (const auto& [handle, error] : s.poisons()) {
      c.poisons.push_back(CheckpointedPoison{handle, error});
    }
    sessions.push_back(std::move(c));
  }
  return sessions;
}

absl::StatusOr<std::vector<CheckpointedSession>> Device::Capture(HostChunkCallback sink) {
  std::vector<CheckpointedSession> sessions = CaptureTables();
  std::vector<ResolvedBinding> bindings;
  for (const CheckpointedSession& c : sessions) {
    Session& s = *sessions_.Get(c.id);
    for (const CheckpointedHandle& h : c.handles) {
      bindings.push_back(ResolvedBinding{s.Find(h.id)->slice, 0, h.size});
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
  if (absl::Status status = RestoreContents(*server_, sessions_, *s, session, source);
      !status.ok()) {
    Free(*sessions_.Remove(session.id));
    return status;
  }
  s->set_resumable(true);
  return absl::OkStatus();
}

}  // namespace cubed
