// Device: capture and restore of sessions (Note [Checkpoint and restore], device.h).

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/channel/device.h"

namespace cubed {
namespace {

// Recreates the handles and poisons of `c` in `s`, which is empty. On error the caller frees
// the session, and with it whatever was added.
absl::Status RestoreContents(ComputeServer& server, SessionTable& table, Session& s,
                             CheckpointedSession& c) {
  for (CheckpointedHandle& h : c.handles) {
    if (h.id.value() == 0 || s.InUse(h.id)) {
      return absl::InvalidArgumentError(absl::StrCat("session ", c.id.value(), ": handle id ",
                                                     h.id.value(), " is 0 or appears twice"));
    }
    if (h.size == 0 || h.bytes.size() != h.size || h.refcount == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("session ", c.id.value(), ": handle ", h.id.value(), " has size ", h.size,
                       ", ", h.bytes.size(), " bytes and refcount ", h.refcount));
    }
    ASSIGN_OR_RETURN(
        Allocation allocation,
        server.Create(
            absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(h.bytes.data()), h.bytes.size()),
            s.memory_owner()));
    if (allocation.size != h.size) {
      server.Free(allocation.slice);
      return absl::InternalError(absl::StrCat("handle ", h.id.value(), ": allocated ",
                                              allocation.size, " bytes for ", h.size));
    }
    s.AddHandleWithId(h.id, allocation.slice, h.size);
    s.Find(h.id)->refcount = h.refcount;
    table.Account(s, h.size, +1);
    std::string().swap(h.bytes);  // The device has them now.
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

void Device::Capture(CheckpointCallback done) {
  auto sessions = std::make_shared<std::vector<CheckpointedSession>>();
  std::vector<ResolvedBinding> bindings;
  for (SessionId id : sessions_.ids()) {
    const Session& s = *sessions_.Get(id);
    CheckpointedSession c;
    c.id = id;
    c.device = index_;
    c.owner_name = s.owner() != nullptr ? s.owner()->name : "";
    c.lease = s.lease();
    c.stream_seq = *s.stream_seq();
    for (const auto& [handle, entry] : s.handles()) {
      c.handles.push_back(CheckpointedHandle{handle, entry.size, entry.refcount, ""});
      bindings.push_back(ResolvedBinding{entry.slice, 0, entry.size});
    }
    for (const auto& [handle, error] : s.poisons()) {
      c.poisons.push_back(CheckpointedPoison{handle, error});
    }
    sessions->push_back(std::move(c));
  }
  if (bindings.empty()) {  // Nothing to read: still wait for the work queued before.
    server_->Sync([sessions, done = std::move(done)](absl::Status status) mutable {
      if (!status.ok()) return done(status);
      done(std::move(*sessions));
    });
    return;
  }
  auto bytes = std::make_shared<std::vector<std::string>>();
  std::vector<std::string>* out = bytes.get();
  server_->Read(std::move(bindings), out,
                [sessions, bytes, done = std::move(done)](absl::Status status) mutable {
                  if (!status.ok()) return done(status);
                  size_t next = 0;
                  for (CheckpointedSession& c : *sessions) {
                    for (CheckpointedHandle& h : c.handles) h.bytes = std::move((*bytes)[next++]);
                  }
                  done(std::move(*sessions));
                });
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

absl::Status Device::RestoreSession(CheckpointedSession session, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, sessions_.Restore(session.id, session.lease, now, session.owner));
  if (absl::Status status = RestoreContents(*server_, sessions_, *s, session); !status.ok()) {
    Free(*sessions_.Remove(session.id));
    return status;
  }
  s->set_resumable(true);
  return absl::OkStatus();
}

}  // namespace cubed
