#include "server/channel/stream_runner.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"

namespace cubed {
namespace {

using Kind = StreamCommand::Kind;

absl::Span<const uint8_t> Bytes(const std::string& s) {
  return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

bool IsTensor(Kind kind) { return kind == Kind::kCreateTensor || kind == Kind::kEmptyTensor; }

bool IsNewAllocation(Kind kind) {
  return kind == Kind::kCreate || kind == Kind::kEmpty || IsTensor(kind);
}

StreamReply ErrorReply(uint64_t seq, const absl::Status& status) {
  StreamReply reply;
  reply.seq = seq;
  reply.status = status;
  return reply;
}

// The error a failed command poisons with and sync reports (Note [Poisoned handles]): the
// original code, the message prefixed with the command, unless it already is a poison.
absl::Status Prefixed(const StreamCommand& command, const absl::Status& status) {
  if (status.GetPayload(kPoisonPayload).has_value()) return status;
  return absl::Status(status.code(),
                      absl::StrCat("command ", command.seq, " (", KindName(command.kind),
                                   ") failed: ", status.message()));
}

}  // namespace

absl::StatusOr<StreamOpened> StreamRunner::Open(Device& device, uint64_t lease_ms,
                                                PrincipalPtr owner,
                                                Session::ClosedCallback on_closed) {
  absl::StatusOr<SessionGrant> grant = device.OpenSession(lease_ms, absl::Now(), std::move(owner));
  if (!grant.ok()) return grant.status();
  session_ = grant->session;
  seq_cell_ = device.StreamSeqOf(session_);
  if (on_closed != nullptr) {
    (void)device.WatchSession(session_, std::move(on_closed));  // Just opened: cannot fail.
  }
  return StreamOpened{grant->session,
                      static_cast<uint64_t>(absl::ToInt64Milliseconds(grant->lease)),
                      kFirstClientId};
}

absl::StatusOr<StreamOpened> StreamRunner::Resume(Device& device, SessionId session,
                                                  const PrincipalPtr& owner,
                                                  Session::ClosedCallback on_closed) {
  if (!device.IsOwnedBy(session, owner.get())) return SessionNotFound(session);
  absl::StatusOr<absl::Duration> lease = device.TakeResumable(session, absl::Now());
  if (!lease.ok()) return lease.status();
  session_ = session;
  seq_cell_ = device.StreamSeqOf(session_);
  if (on_closed != nullptr) (void)device.WatchSession(session_, std::move(on_closed));
  return StreamOpened{session, static_cast<uint64_t>(absl::ToInt64Milliseconds(*lease)),
                      kFirstClientId, seq_cell_ != nullptr ? *seq_cell_ : 0};
}

void StreamRunner::Close(Device& device) {
  if (session_ == SessionId()) return;
  // Closed by its own stream: nobody to tell. NOT_FOUND when it expired meanwhile.
  (void)device.WatchSession(session_, nullptr);
  (void)device.CloseSession(session_);
  session_ = SessionId();
}

absl::Status StreamRunner::Fail(Device& device, const StreamCommand& command,
                                const absl::Status& status, ReplySink& sink, bool id_ok) {
  ++failures_;
  last_failure_code_ = status.code();
  if (Answers(command.kind)) {  // Reports its own failure, as it happened.
    sink.Fill(sink.Reserve(), ErrorReply(command.seq, status));
    return status;
  }
  const absl::Status error = Prefixed(command, status);
  spdlog::debug("session {}: {}", session_.value(), error.ToString());
  if (IsNewAllocation(command.kind) && id_ok) device.PoisonId(session_, command.id, error);
  if (command.kind == Kind::kExecute || command.kind == Kind::kReplayGraph) {
    device.PoisonHandles(session_, command.outputs, error);
  }
  if (IsTensor(command.kind)) sink.Fill(sink.Reserve(), ErrorReply(command.seq, error));
  if (failed_++ == 0) first_error_ = error;
  return error;
}

absl::Status StreamRunner::CheckSeq(const StreamCommand& command, bool& seq_ok) {
  seq_ok = !have_seq_ || command.seq > last_seq_;
  if (!seq_ok) {
    return absl::InvalidArgumentError(absl::StrCat("seq: ", command.seq,
                                                   " is not greater than the previous seq ",
                                                   last_seq_, "; seq must strictly increase"));
  }
  have_seq_ = true;
  last_seq_ = command.seq;
  if (seq_cell_ != nullptr) *seq_cell_ = command.seq;
  return command.invalid;
}

absl::Status StreamRunner::StartBulk(Device& device, StreamCommand& command, ReplySink& sink) {
  bool seq_ok = false;
  const absl::Status status = CheckSeq(command, seq_ok);
  const absl::Time now = absl::Now();
  if (IsBulkCreate(command)) {
    if (absl::Status id = device.CheckClientId(session_, command.id, now); !id.ok()) {
      return Fail(device, command, seq_ok ? id : status, sink, /*id_ok=*/false);
    }
    if (!status.ok()) return Fail(device, command, status, sink, /*id_ok=*/true);
    absl::StatusOr<NewHandle> h;
    if (command.kind == Kind::kCreate) {
      h = device.EmptyWithId(session_, command.id, command.size, now);
    } else {
      h = device.EmptyTensorWithId(session_, command.id, command.shape, command.elem_size, now);
    }
    if (!h.ok()) return Fail(device, command, h.status(), sink, /*id_ok=*/true);
    command.allocated = h->size;
    if (command.kind == Kind::kCreate) {
      command.shape = {command.size};
      command.strides = {1};
      command.elem_size = 1;
    } else {
      command.strides = h->strides;
    }
    return absl::OkStatus();
  }
  if (!status.ok()) return Fail(device, command, status, sink, /*id_ok=*/false);
  const bool raw = command.kind == Kind::kRead;
  if (raw) {
    command.read_tensor.clear();
    for (const BindingRef& b : command.read) command.read_tensor.push_back(TensorRef{b, {}, {}, 0});
  }
  if (absl::Status s = device.CheckBulkRead(session_, command.read_tensor, raw, now); !s.ok()) {
    return Fail(device, command, s, sink, /*id_ok=*/false);
  }
  return absl::OkStatus();
}

absl::Status StreamRunner::FinishBulk(Device& device, StreamCommand& command,
                                      const absl::Status& status, ReplySink& sink) {
  if (!status.ok()) {
    if (IsBulkCreate(command)) {
      (void)device.Release(session_, absl::MakeConstSpan(&command.id, 1), absl::Now());
      return Fail(device, command, status, sink, /*id_ok=*/true);
    }
    return Fail(device, command, status, sink, /*id_ok=*/false);
  }
  if (command.kind == Kind::kCreate) return absl::OkStatus();
  StreamReply reply;
  reply.seq = command.seq;
  if (command.kind == Kind::kCreateTensor) {
    reply.result = StreamReply::Result::kTensor;
    reply.strides = command.strides;
    reply.tensor_size = command.allocated;
  }
  sink.Fill(sink.Reserve(), std::move(reply));
  return absl::OkStatus();
}

void StreamRunner::Run(Device& device, StreamCommand& command,
                       const std::shared_ptr<ReplySink>& sink, absl::Time now) {
  bool seq_ok = false;
  absl::Status status = CheckSeq(command, seq_ok);
  if (IsNewAllocation(command.kind)) {
    // A bad id is not entered (reported as such unless the seq is bad too); any other failure
    // poisons it.
    if (absl::Status id = device.CheckClientId(session_, command.id, now); !id.ok()) {
      (void)Fail(device, command, seq_ok ? id : status, *sink, /*id_ok=*/false);
      return;
    }
    if (!status.ok()) {
      (void)Fail(device, command, status, *sink, /*id_ok=*/true);
      return;
    }
    RunCreate(device, command, *sink, now);
    return;
  }
  if (command.kind == Kind::kBeginGraph) {  // Records even when it fails (end_graph answers).
    device.BeginGraph(session_, command.graph, command.ids, status, now);
    return;
  }
  if (!status.ok()) {
    if (command.kind == Kind::kExecute) device.FailRecording(session_, status);
    (void)Fail(device, command, status, *sink, /*id_ok=*/false);
    return;
  }
  switch (command.kind) {
    case Kind::kExecute:
      status = device.Recording(session_)
                   ? device.RecordExecute(session_, command.execute, command.outputs, now)
                   : device.Execute(session_, command.execute, now);
      break;
    case Kind::kReplayGraph:
      status = device.ReplayGraph(session_, command.graph, command.ids, now, &command.outputs);
      break;
    case Kind::kReleaseGraph:
      status = device.ReleaseGraph(session_, command.graph, now);
      break;
    case Kind::kRelease:
      RunRelease(device, command, *sink, now);
      return;
    case Kind::kFlush:
      status = device.Flush(session_, now);
      break;
    case Kind::kMemoryCleanup:
      device.Cleanup();
      break;
    case Kind::kStartProfile:
      status = device.StartProfile(session_, now);
      break;
    case Kind::kReleaseRegion:
      status = device.ReleaseRegion(session_, command.region->region, now);
      break;
    default:
      RunAnswering(device, command, sink, now);
      return;
  }
  if (!status.ok()) (void)Fail(device, command, status, *sink, /*id_ok=*/false);
}

void StreamRunner::RunCreate(Device& device, StreamCommand& command, ReplySink& sink,
                             absl::Time now) {
  absl::StatusOr<NewHandle> h;
  switch (command.kind) {
    case Kind::kCreate:
      h = command.region.has_value()
              ? device.CreateFromRegion(session_, command.id, *command.region, now)
              : device.CreateWithId(session_, command.id, Bytes(command.data), now);
      break;
    case Kind::kCreateTensor:
      if (command.region.has_value()) {
        h = device.CreateTensorFromRegion(session_, command.id, *command.region, command.shape,
                                          command.elem_size, now);
        break;
      }
      h = device.CreateTensorWithId(session_, command.id, Bytes(command.data), command.shape,
                                    command.elem_size, now);
      break;
    case Kind::kEmpty:
      h = device.EmptyWithId(session_, command.id, command.size, now);
      break;
    default:
      h = device.EmptyTensorWithId(session_, command.id, command.shape, command.elem_size, now);
      break;
  }
  if (!h.ok()) {
    (void)Fail(device, command, h.status(), sink, /*id_ok=*/true);
    return;
  }
  if (IsTensor(command.kind)) {
    StreamReply reply;
    reply.seq = command.seq;
    reply.result = StreamReply::Result::kTensor;
    reply.strides = std::move(h->strides);
    reply.tensor_size = h->size;
    sink.Fill(sink.Reserve(), std::move(reply));
  }
}

void StreamRunner::RunReadIntoRegion(Device& device, StreamCommand& command,
                                     const std::shared_ptr<ReplySink>& sink, uint64_t slot) {
  const uint64_t seq = command.seq;
  const absl::Time now = absl::Now();
  if (command.kind == Kind::kRead) {  // Raw bindings are byte tensors from here on.
    command.read_tensor.clear();
    for (const BindingRef& b : command.read) command.read_tensor.push_back(TensorRef{b, {}, {}, 0});
    if (absl::Status s = device.CheckBulkRead(session_, command.read_tensor, /*raw=*/true, now);
        !s.ok()) {
      sink->Fill(slot, ErrorReply(seq, s));
      return;
    }
  }
  device.ReadTensorIntoRegion(session_, command.read_tensor, *command.region, now,
                              [sink, slot, seq](absl::StatusOr<uint64_t> written) {
                                StreamReply reply = ErrorReply(seq, written.status());
                                if (written.ok()) {
                                  reply.result = StreamReply::Result::kRegionBytes;
                                  reply.region_bytes = *written;
                                }
                                sink->Fill(slot, std::move(reply));
                              });
}

void StreamRunner::RunRelease(Device& device, StreamCommand& command, ReplySink& sink,
                              absl::Time now) {
  // One by one: an unknown id does not keep the others.
  absl::Status first;
  for (size_t i = 0; i < command.ids.size(); ++i) {
    absl::Status s = device.Release(session_, absl::MakeConstSpan(&command.ids[i], 1), now);
    if (!s.ok() && first.ok()) {
      // Device names the id as handles[0] of the one-id release: name it as the command does.
      absl::string_view message = s.message();
      absl::ConsumePrefix(&message, "handles[0]: ");
      first = absl::Status(s.code(), absl::StrCat("ids[", i, "]: ", message));
    }
  }
  if (!first.ok()) (void)Fail(device, command, first, sink, /*id_ok=*/false);
}

void StreamRunner::RunAnswering(Device& device, StreamCommand& command,
                                const std::shared_ptr<ReplySink>& sink, absl::Time now) {
  const uint64_t slot = sink->Reserve();
  const uint64_t seq = command.seq;
  switch (command.kind) {
    case Kind::kRead:
    case Kind::kReadTensor: {
      if (command.region.has_value()) {
        RunReadIntoRegion(device, command, sink, slot);
        return;
      }
      // The bytes land in `out`, kept alive by the completion, then move into the reply.
      auto out = std::make_shared<std::vector<std::string>>();
      auto done = [sink, slot, seq, out](absl::Status s) {
        StreamReply reply = ErrorReply(seq, s);
        if (s.ok()) {
          reply.result = StreamReply::Result::kRead;
          reply.read = std::move(*out);
        }
        sink->Fill(slot, std::move(reply));
      };
      if (command.kind == Kind::kRead) {
        device.Read(session_, command.read, out.get(), now, std::move(done));
      } else {
        device.ReadTensor(session_, command.read_tensor, out.get(), now, std::move(done));
      }
      return;
    }
    case Kind::kSync: {
      const absl::Status first = std::exchange(first_error_, absl::OkStatus());
      const uint64_t failed = std::exchange(failed_, 0);
      device.Sync(session_, now, [sink, slot, seq, first, failed](absl::Status s) {
        StreamReply reply;
        if (failed > 0) {
          reply = ErrorReply(
              seq, absl::Status(first.code(), absl::StrCat(first.message(), " (", failed,
                                                           failed == 1 ? " command" : " commands",
                                                           " failed since the previous sync)")));
          reply.failed_commands = failed;
        } else {
          reply = ErrorReply(seq, s);
        }
        sink->Fill(slot, std::move(reply));
      });
      return;
    }
    case Kind::kMemoryUsage: {
      StreamReply reply = ErrorReply(seq, absl::OkStatus());
      reply.result = StreamReply::Result::kMemoryUsage;
      reply.memory_usage = device.Usage();
      sink->Fill(slot, std::move(reply));
      return;
    }
    case Kind::kEndGraph: {
      absl::StatusOr<uint64_t> steps = device.EndGraph(session_, now);
      StreamReply reply = ErrorReply(seq, steps.status());
      if (steps.ok()) {
        reply.result = StreamReply::Result::kGraphSteps;
        reply.graph_steps = *steps;
      }
      sink->Fill(slot, std::move(reply));
      return;
    }
    case Kind::kEndProfile:
      device.EndProfile(session_, now, [sink, slot, seq](absl::StatusOr<absl::Duration> d) {
        StreamReply reply = ErrorReply(seq, d.status());
        if (d.ok()) {
          reply.result = StreamReply::Result::kDuration;
          reply.duration_ns = static_cast<uint64_t>(absl::ToInt64Nanoseconds(*d));
        }
        sink->Fill(slot, std::move(reply));
      });
      return;
    default:
      sink->Fill(slot, ErrorReply(seq, absl::InternalError(absl::StrCat("command ", seq, ": kind ",
                                                                        KindName(command.kind),
                                                                        " has no runner"))));
      return;
  }
}

}  // namespace cubed
