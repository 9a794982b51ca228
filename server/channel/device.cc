#include "server/channel/device.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/checked_math.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace cubed {
namespace {

// Note [Poisoned handles] (session.h): the payload marks the error as a poison.
absl::Status MarkPoison(absl::Status error) {
  error.SetPayload(kPoisonPayload, absl::Cord("1"));
  return error;
}

// Checks that a tensor layout addresses only the `view` bytes of its binding.
absl::Status CheckTensorSpan(const TensorRef& t, uint64_t view, absl::string_view what) {
  uint64_t span = 1;
  for (size_t d = 0; d < t.shape.size(); ++d) {
    if (t.shape[d] == 0) return absl::OkStatus();  // No elements: addresses nothing.
    std::optional<uint64_t> extent = CheckedMul(t.shape[d] - 1, t.strides[d]);
    std::optional<uint64_t> next = extent ? CheckedAdd(span, *extent) : std::nullopt;
    if (!next) return absl::InvalidArgumentError(absl::StrCat(what, ": layout overflows"));
    span = *next;
  }
  std::optional<uint64_t> span_bytes = CheckedMul(span, t.elem_size);
  if (!span_bytes || *span_bytes > view) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": shape and strides address ",
                                                   span_bytes ? *span_bytes : UINT64_MAX,
                                                   " bytes but the binding holds ", view));
  }
  return absl::OkStatus();
}

// Whether shape/strides are dense row-major (dims of size 1 may have any stride).
bool IsDense(absl::Span<const uint64_t> shape, absl::Span<const uint64_t> strides) {
  uint64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (strides[i] != stride && shape[i] != 1) return false;
    stride *= shape[i];
  }
  return true;
}

}  // namespace

absl::Status DrainingError() {
  return absl::UnavailableError(
      "the daemon is draining (writing a checkpoint and stopping): retry on the next daemon");
}

Device::Device(uint32_t index, std::unique_ptr<ComputeServer> server, DeviceOptions options)
    : index_(index),
      server_(std::move(server)),
      options_(options),
      sessions_(index, options.default_lease, options.max_lease) {}

Device::~Device() {
  for (SessionId id : sessions_.ids()) Free(*sessions_.Remove(id));
}

absl::StatusOr<SessionGrant> Device::OpenSession(uint64_t lease_ms, absl::Time now,
                                                 PrincipalPtr owner) {
  if (frozen_) return DrainingError();
  RETURN_IF_ERROR(server_->Lost());
  ASSIGN_OR_RETURN(Session * s, sessions_.Open(lease_ms, now, std::move(owner)));
  return SessionGrant{s->id(), s->lease()};
}

void Device::Free(Session& session) {
  if (session.profile().has_value()) {
    server_->EndProfile(*session.profile(), [](absl::StatusOr<absl::Duration>) {});
    session.profile().reset();
  }
  if (std::unique_ptr<TraceRecorder> trace = session.take_trace(); trace != nullptr) {
    std::vector<uint64_t> marks = trace->Marks();  // Timed only to be freed.
    if (!marks.empty()) server_->TimeMarks(std::move(marks), [](auto) {});
  }
  // Graphs first: their backend state may refer to the memory freed below.
  session.recording().reset();
  session.DropGraphs();
  for (const auto& [handle, entry] : session.handles()) server_->Free(entry.slice);
  for (const auto& [slice, size] : session.Orphans()) server_->Free(slice);
  for (const auto& [id, region] : session.regions()) server_->UnregisterHostMemory(region->bytes());
}

bool Device::IsOwnedBy(SessionId session, const Principal* principal) const {
  return sessions_.IsOwnedBy(session, principal);
}

absl::StatusOr<uint64_t> Device::CloseSession(SessionId session) {
  std::unique_ptr<Session> s = sessions_.Remove(session);
  if (s == nullptr) return SessionNotFound(session);
  const uint64_t released = s->handles().size();
  Session::ClosedCallback on_closed = s->take_on_closed();
  Free(*s);
  spdlog::info("session {} closed ({} handles released)", session.value(), released);
  if (on_closed != nullptr) {
    on_closed(absl::NotFoundError(
        absl::StrCat("session ", session.value(), " was closed by a CloseSession call")));
  }
  return released;
}

size_t Device::ExpireSessions(absl::Time now) {
  const std::vector<SessionId> expired = sessions_.Expired(now);
  for (SessionId id : expired) {
    std::unique_ptr<Session> s = sessions_.Remove(id);
    const size_t handles = s->handles().size();
    Session::ClosedCallback on_closed = s->take_on_closed();
    Free(*s);
    spdlog::info("session {} expired ({} handles released)", id.value(), handles);
    if (on_closed != nullptr) {
      on_closed(absl::NotFoundError(absl::StrCat("session ", id.value(), " expired: its lease of ",
                                                 absl::FormatDuration(s->lease()),
                                                 " passed without a call")));
    }
  }
  return expired.size();
}

absl::Status Device::WatchSession(SessionId session, Session::ClosedCallback on_closed) {
  Session* s = sessions_.Get(session);
  if (s == nullptr) return SessionNotFound(session);
  s->set_on_closed(std::move(on_closed));
  return absl::OkStatus();
}

absl::StatusOr<Session*> Device::FindSession(SessionId session, absl::Time now) {
  if (frozen_) return DrainingError();
  // Note [Lost devices] (server/daemon/daemon.cc): nothing more runs on a lost device.
  RETURN_IF_ERROR(server_->Lost());
  absl::StatusOr<Session*> s = sessions_.Find(session, now);
  // NoteArrival's time goes to this command's trace event; a unary call's gets none.
  if (s.ok() && (*s)->trace() != nullptr) {
    (*s)->trace()->set_arrival(arrival_ == absl::InfinitePast() ? 0 : absl::ToUnixNanos(arrival_));
  }
  return s;
}

absl::StatusOr<ResolvedBinding> Device::Resolve(Session& session, const BindingRef& ref,
                                                absl::string_view what) const {
  if (const absl::Status* poison = session.PoisonOf(ref.handle)) return *poison;
  const HandleEntry* entry = session.Find(ref.handle);
  if (entry == nullptr) {
    return absl::NotFoundError(
        absl::StrCat(what, ": handle ", ref.handle.value(), " is not a handle of this session"));
  }
  if (ref.offset_start > entry->size) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": offset_start ", ref.offset_start, " is past the end of handle ",
                     ref.handle.value(), " (", entry->size, " bytes)"));
  }
  const uint64_t left = entry->size - ref.offset_start;
  if (ref.offset_end > left) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": offset_end ", ref.offset_end,
                                                   " exceeds the ", left, " bytes of handle ",
                                                   ref.handle.value(), " left after offset_start ",
                                                   ref.offset_start, " (size ", entry->size, ")"));
  }
  return ResolvedBinding{entry->slice, ref.offset_start, left - ref.offset_end};
}

absl::StatusOr<NewHandle> Device::AddHandle(Session& session,
                                            absl::StatusOr<Allocation> allocation) {
  if (!allocation.ok()) return allocation.status();
  if (absl::Status quota = sessions_.CheckQuota(session, allocation->size); !quota.ok()) {
    server_->Free(allocation->slice);
    return quota;
  }
  NewHandle h;
  h.size = allocation->size;
  h.strides = std::move(allocation->strides);
  h.handle = session.AddHandle(allocation->slice, allocation->size);
  sessions_.Account(session, h.size, +1);
  return h;
}

absl::StatusOr<NewHandle> Device::Create(SessionId session, absl::Span<const uint8_t> data,
                                         absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  ScopedTraceEvent trace(s->trace(), "memory");
  trace.set_name("create");
  trace.set_bytes(data.size());
  RETURN_IF_ERROR(sessions_.CheckQuota(*s, data.size()));
  return AddHandle(*s, server_->Create(data, s->memory_owner()));
}

absl::StatusOr<NewHandle> Device::CreateTensor(SessionId session, absl::Span<const uint8_t> data,
                                               absl::Span<const uint64_t> shape, uint32_t elem_size,
                                               absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  ScopedTraceEvent trace(s->trace(), "memory");
  trace.set_name("create");
  trace.set_bytes(data.size());
  RETURN_IF_ERROR(sessions_.CheckQuota(*s, data.size()));
  return AddHandle(*s, server_->CreateTensor(data, shape, elem_size, s->memory_owner()));
}

absl::StatusOr<NewHandle> Device::Empty(SessionId session, uint64_t size, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  ScopedTraceEvent trace(s->trace(), "memory");
  trace.set_name("empty");
  trace.set_bytes(size);
  RETURN_IF_ERROR(sessions_.CheckQuota(*s, size));
  return AddHandle(*s, server_->Empty(size, s->memory_owner()));
}

absl::StatusOr<NewHandle> Device::EmptyTensor(SessionId session, absl::Span<const uint64_t> shape,
                                              uint32_t elem_size, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  ScopedTraceEvent trace(s->trace(), "memory");
  trace.set_name("empty");
  trace.set_bytes(0);
  ASSIGN_OR_RETURN(const uint64_t bytes, TensorBytes(shape, elem_size, "shape"));
  RETURN_IF_ERROR(sessions_.CheckQuota(*s, bytes));
  return AddHandle(*s, server_->EmptyTensor(shape, elem_size, s->memory_owner()));
}

TraceRecorder* Device::TraceOf(SessionId session) const {
  Session* s = sessions_.Get(session);
  return s == nullptr ? nullptr : s->trace();
}

absl::Status Device::CheckReadBytes(uint64_t total) const {
  if (total <= options_.max_read_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "read of ", total, " bytes exceeds the ", options_.max_read_bytes,
      "-byte message limit (--max_message_bytes); read in parts (offsets), or use a bulk read"));
}

void Device::Read(SessionId session, const std::vector<BindingRef>& bindings,
                  std::vector<std::string>* out, absl::Time now, DoneCallback done) {
  auto resolve = [&]() -> absl::StatusOr<std::vector<ResolvedBinding>> {
    ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
    std::vector<ResolvedBinding> resolved;
    resolved.reserve(bindings.size());
    uint64_t total = 0;
    for (size_t i = 0; i < bindings.size(); ++i) {
      const std::string what = absl::StrCat("bindings[", i, "]");
      ASSIGN_OR_RETURN(ResolvedBinding r, Resolve(*s, bindings[i], what));
      ASSIGN_OR_RETURN(total, CheckedSum(total, r.size, what));
      resolved.push_back(r);
    }
    RETURN_IF_ERROR(CheckReadBytes(total));
    return resolved;
  };
  absl::StatusOr<std::vector<ResolvedBinding>> resolved = resolve();
  if (!resolved.ok()) {
    done(resolved.status());
    return;
  }
  TraceRecorder* const traced = TraceOf(session);
  ScopedTraceEvent trace(traced, "transfer");
  trace.set_name("read");
  if (traced != nullptr) {
    uint64_t bytes = 0;
    for (const ResolvedBinding& r : *resolved) bytes += r.size;  // Checked against the limit.
    trace.set_bytes(bytes);
  }
  server_->Read(*std::move(resolved), out, std::move(done));
}

void Device::ReadTensor(SessionId session, const std::vector<TensorRef>& tensors,
                        std::vector<std::string>* out, absl::Time now, DoneCallback done) {
  auto resolve = [&]() -> absl::StatusOr<std::vector<ResolvedTensor>> {
    ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
    uint64_t total = 0;
    ASSIGN_OR_RETURN(std::vector<ResolvedTensor> resolved,
                     ResolveTensors(*s, tensors, nullptr, &total));
    RETURN_IF_ERROR(CheckReadBytes(total));
    return resolved;
  };
  absl::StatusOr<std::vector<ResolvedTensor>> resolved = resolve();
  if (!resolved.ok()) {
    done(resolved.status());
    return;
  }
  TraceRecorder* const traced = TraceOf(session);
  ScopedTraceEvent trace(traced, "transfer");
  trace.set_name("read");
  if (traced != nullptr) {
    uint64_t bytes = 0;
    for (const ResolvedTensor& t : *resolved) {
      uint64_t n = t.elem_size;
      for (uint64_t d : t.shape) n *= d;  // Checked against the read limit already.
      bytes += n;
    }
    trace.set_bytes(bytes);
  }
  server_->ReadTensor(*std::move(resolved), out, std::move(done));
}

absl::StatusOr<std::vector<ResolvedTensor>> Device::ResolveTensors(
    Session& session, const std::vector<TensorRef>& tensors, std::vector<uint64_t>* sizes,
    uint64_t* total) const {
  std::vector<ResolvedTensor> resolved;
  *total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string what = absl::StrCat("bindings[", i, "]");
    const TensorRef& t = tensors[i];
    ASSIGN_OR_RETURN(ResolvedBinding r, Resolve(session, t.binding, what));
    RETURN_IF_ERROR(CheckTensorSpan(t, r.size, what));
    ASSIGN_OR_RETURN(const uint64_t bytes, TensorBytes(t.shape, t.elem_size, what));
    ASSIGN_OR_RETURN(*total, CheckedSum(*total, bytes, what));
    if (sizes != nullptr) sizes->push_back(bytes);
    resolved.push_back(ResolvedTensor{r, t.shape, t.strides, t.elem_size});
  }
  return resolved;
}

absl::Status Device::CheckBulkRead(SessionId session, std::vector<TensorRef>& tensors, bool raw,
                                   absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string what = absl::StrCat("bindings[", i, "]");
    TensorRef& t = tensors[i];
    ASSIGN_OR_RETURN(ResolvedBinding r, Resolve(*s, t.binding, what));
    if (raw) {
      t.shape = {r.size};
      t.strides = {1};
      t.elem_size = 1;
      continue;
    }
    RETURN_IF_ERROR(CheckTensorSpan(t, r.size, what));
    RETURN_IF_ERROR(TensorBytes(t.shape, t.elem_size, what).status());
  }
  return absl::OkStatus();
}

void Device::ReadPiece(SessionId session, const TensorRef& piece, std::string* out, absl::Time now,
                       DoneCallback done) {
  auto resolve = [&]() -> absl::StatusOr<ResolvedTensor> {
    ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
    ASSIGN_OR_RETURN(ResolvedBinding r, Resolve(*s, piece.binding, "binding"));
    RETURN_IF_ERROR(CheckTensorSpan(piece, r.size, "binding"));
    return ResolvedTensor{r, piece.shape, piece.strides, piece.elem_size};
  };
  absl::StatusOr<ResolvedTensor> t = resolve();
  if (!t.ok()) {
    done(t.status());
    return;
  }
  auto bytes = std::make_shared<std::vector<std::string>>();
  DoneCallback finish = [bytes, out, done = std::move(done)](absl::Status s) mutable {
    if (s.ok() && bytes->size() == 1) *out = std::move((*bytes)[0]);
    done(std::move(s));
  };
  if (IsDense(t->shape, t->strides)) {
    absl::StatusOr<uint64_t> size = TensorBytes(t->shape, t->elem_size, "binding");
    if (!size.ok()) {
      finish(size.status());
      return;
    }
    ResolvedBinding b = t->binding;
    b.size = *size;
    server_->Read({b}, bytes.get(), std::move(finish));
  } else {
    server_->ReadTensor({*std::move(t)}, bytes.get(), std::move(finish));
  }
}

void Device::WritePiece(SessionId session, HandleId handle, absl::Span<const uint64_t> shape,
                        absl::Span<const uint64_t> strides, uint32_t elem_size,
                        uint64_t dense_offset, absl::Span<const absl::Span<const uint8_t>> pieces,
                        absl::Time now, DoneCallback done) {
  uint64_t size = 0;
  for (absl::Span<const uint8_t> piece : pieces) size += piece.size();  // Each <= 4 MiB.
  auto resolve = [&]() -> absl::StatusOr<ResolvedTensor> {
    ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
    ASSIGN_OR_RETURN(ResolvedBinding r, Resolve(*s, BindingRef{handle, 0, 0}, "id"));
    ASSIGN_OR_RETURN(const uint64_t total, TensorBytes(shape, elem_size, "id"));
    if (dense_offset > total || size > total - dense_offset) {
      return absl::InvalidArgumentError(absl::StrCat("bytes [", dense_offset, ", +", size,
                                                     ") exceed the ", total, " bytes of handle ",
                                                     handle.value()));
    }
    return ResolvedTensor{r, std::vector<uint64_t>(shape.begin(), shape.end()),
                          std::vector<uint64_t>(strides.begin(), strides.end()), elem_size};
  };
  absl::StatusOr<ResolvedTensor> t = resolve();
  if (!t.ok()) {
    done(t.status());
    return;
  }
  server_->Write(*t, dense_offset, pieces, std::move(done));
}

absl::StatusOr<ResourceDescription> Device::GetResource(SessionId session,
                                                        const BindingRef& binding, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  ASSIGN_OR_RETURN(ResolvedBinding r, Resolve(*s, binding, "binding"));
  return server_->GetResource(r);
}

absl::StatusOr<Launch> Device::PrepareLaunch(Session& s, const ExecuteCommand& command) const {
  if (command.unchecked && !options_.allow_unchecked) {
    return absl::PermissionDeniedError(
        "mode: unchecked execution is not allowed by this daemon (start it with "
        "--allow_unchecked)");
  }
  Launch launch;
  launch.unchecked = command.unchecked;
  launch.count.dynamic = command.dynamic_count;
  if (command.dynamic_count) {
    ASSIGN_OR_RETURN(launch.count.binding, Resolve(s, command.count_binding, "count.dynamic"));
    if (launch.count.binding.size < 12) {
      return absl::InvalidArgumentError(
          absl::StrCat("count.dynamic: the binding holds ", launch.count.binding.size,
                       " bytes; a dynamic cube count needs 12 (three u32)"));
    }
  } else {
    const DeviceDescription& d = server_->Description();
    for (int i = 0; i < 3; ++i) {
      if (command.count[i] == 0 || command.count[i] > d.max_cube_count[i]) {
        return absl::InvalidArgumentError(
            absl::StrCat("count.static_count.", std::string(1, "xyz"[i]), " = ", command.count[i],
                         " is outside 1 .. ", d.max_cube_count[i]));
      }
    }
    launch.count.x = command.count[0];
    launch.count.y = command.count[1];
    launch.count.z = command.count[2];
  }
  launch.buffers.reserve(command.buffers.size());
  for (size_t i = 0; i < command.buffers.size(); ++i) {
    absl::StatusOr<ResolvedBinding> r = Resolve(s, command.buffers[i], "bindings.buffers");
    if (!r.ok()) {  // Again, naming the index (built only on failure: none per command).
      return Resolve(s, command.buffers[i], absl::StrCat("bindings.buffers[", i, "]")).status();
    }
    launch.buffers.push_back(*r);
  }
  return launch;
}

absl::Status Device::Execute(SessionId session, ExecuteCommand& command, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  ScopedTraceEvent trace(s->trace(), "kernel");
  trace.set_name(command.kernel.is_builtin ? absl::string_view(command.kernel.builtin.name)
                                           : absl::string_view(command.kernel.cuda.entry_point));
  ASSIGN_OR_RETURN(Launch launch, PrepareLaunch(*s, command));
  launch.borrowed = &command.kernel;
  // The launch's run on the device, where the backend has a clock (Note [Command traces]).
  const bool marked =
      s->trace() != nullptr && s->trace()->has_device_clock() && !s->trace()->full();
  const uint64_t begin = marked ? server_->DeviceMark() : 0;
  absl::Status status = server_->Execute(launch);
  if (marked) trace.set_marks(begin, server_->DeviceMark());
  if (status.ok()) s->CountKernels(1);
  return status;
}

absl::Status Device::Flush(SessionId session, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  ScopedTraceEvent trace(s->trace(), "sync");
  trace.set_name("flush");
  (void)s;
  return server_->Flush();
}

void Device::Sync(SessionId session, absl::Time now, DoneCallback done) {
  absl::StatusOr<Session*> s = FindSession(session, now);
  if (!s.ok()) {
    done(s.status());
    return;
  }
  ScopedTraceEvent trace((*s)->trace(), "sync");
  trace.set_name("sync");
  server_->Sync(std::move(done));
}

absl::Status Device::StartProfile(SessionId session, absl::Time now, uint32_t trace_events) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  if (s->profile().has_value()) {
    return absl::FailedPreconditionError(
        "StartProfile: a profile is already open in this session; call EndProfile first");
  }
  if (trace_events > kMaxTraceEvents) {
    return absl::InvalidArgumentError(absl::StrCat("trace_events: ", trace_events,
                                                   " is more than the ", kMaxTraceEvents,
                                                   " events a trace may hold"));
  }
  ASSIGN_OR_RETURN(ProfileToken token, server_->StartProfile());
  s->profile() = token;
  if (trace_events > 0) {
    auto trace = std::make_unique<TraceRecorder>(trace_events);
    trace->set_base(server_->DeviceMark(), absl::GetCurrentTimeNanos());
    s->set_trace(std::move(trace));
  }
  return absl::OkStatus();
}

void Device::EndProfile(SessionId session, absl::Time now, DurationCallback done,
                        std::unique_ptr<TraceRecorder>* trace) {
  absl::StatusOr<Session*> s = FindSession(session, now);
  if (!s.ok()) {
    done(s.status());
    return;
  }
  if (!(*s)->profile().has_value()) {
    done(absl::FailedPreconditionError(
        "EndProfile: no profile is open in this session; call StartProfile first"));
    return;
  }
  const ProfileToken token = *(*s)->profile();
  (*s)->profile().reset();
  std::unique_ptr<TraceRecorder> recorded = (*s)->take_trace();
  std::vector<uint64_t> marks;
  if (recorded != nullptr) marks = recorded->Marks();
  if (marks.empty()) {
    if (trace != nullptr) *trace = std::move(recorded);
    server_->EndProfile(token, std::move(done));
    return;
  }
  // Both the marks' times and the device time complete on the backend's completion thread(s);
  // `done` runs after both, with the trace's device times filled in. The recorder lives in
  // *trace (the caller keeps it until `done`) or, without one, in the join itself.
  struct Join {
    DurationCallback done;
    std::unique_ptr<TraceRecorder> owned;
    absl::StatusOr<absl::Duration> elapsed = absl::UnknownError("not yet");
    std::atomic<int> remaining{2};
    void Arrive() {
      if (remaining.fetch_sub(1) == 1) done(std::move(elapsed));
    }
  };
  auto join = std::make_shared<Join>();
  join->done = std::move(done);
  TraceRecorder* timed = recorded.get();
  if (trace != nullptr) {
    *trace = std::move(recorded);
  } else {
    join->owned = std::move(recorded);
  }
  server_->TimeMarks(std::move(marks), [join, timed](absl::StatusOr<std::vector<int64_t>> ns) {
    if (ns.ok()) timed->SetDeviceTimes(*ns);  // Else the trace keeps host times only.
    join->Arrive();
  });
  server_->EndProfile(token, [join](absl::StatusOr<absl::Duration> elapsed) {
    join->elapsed = std::move(elapsed);
    join->Arrive();
  });
}

absl::Status Device::Release(SessionId session, absl::Span<const HandleId> handles,
                             absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  ScopedTraceEvent trace(s->trace(), "memory");
  trace.set_name("release");
  // Check first, so that one bad id releases nothing.
  absl::flat_hash_map<HandleId, uint32_t> drops;
  for (size_t i = 0; i < handles.size(); ++i) {
    const HandleEntry* entry = s->Find(handles[i]);
    if (entry == nullptr && s->PoisonOf(handles[i]) != nullptr) {
      if (++drops[handles[i]] > 1) {
        return absl::InvalidArgumentError(absl::StrCat("handles[", i, "]: poisoned id ",
                                                       handles[i].value(), " is released twice"));
      }
      continue;
    }
    if (entry == nullptr) {
      return absl::NotFoundError(absl::StrCat("handles[", i, "]: handle ", handles[i].value(),
                                              " is not a handle of this session"));
    }
    if (++drops[handles[i]] > entry->refcount) {
      return absl::InvalidArgumentError(
          absl::StrCat("handles[", i, "]: handle ", handles[i].value(),
                       " is released more times than it is held (", entry->refcount, ")"));
    }
  }
  for (const auto& [handle, count] : drops) {
    HandleEntry* entry = s->Find(handle);
    if (entry == nullptr) {  // A poisoned id without a handle.
      s->ClearPoison(handle);
      continue;
    }
    entry->refcount -= count;
    if (entry->refcount == 0) {
      if (s->IsHeld(entry->slice)) {  // Kept, and accounted, for its graphs.
        s->Orphan(entry->slice, entry->size);
      } else {
        server_->Free(entry->slice);
        sessions_.Account(*s, entry->size, -1);
      }
      s->Erase(handle);
    }
  }
  return absl::OkStatus();
}

absl::Status Device::CheckClientId(const Session& session, HandleId id) const {
  if (id.value() < kFirstClientId) {
    return absl::InvalidArgumentError(absl::StrCat(
        "id: ", id.value(),
        " is not a client id; client ids have the top bit set (>= ", kFirstClientId, ")"));
  }
  if (session.InUse(id)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "id: ", id.value(), " is already in use in this session; release it before reusing it"));
  }
  return absl::OkStatus();
}

absl::Status Device::CheckClientId(SessionId session, HandleId id, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  return CheckClientId(*s, id);
}

absl::StatusOr<NewHandle> Device::AddHandleWithId(Session& session, HandleId id,
                                                  absl::StatusOr<Allocation> allocation) {
  if (!allocation.ok()) return allocation.status();
  if (absl::Status quota = sessions_.CheckQuota(session, allocation->size); !quota.ok()) {
    server_->Free(allocation->slice);
    return quota;
  }
  NewHandle h;
  h.handle = id;
  h.size = allocation->size;
  h.strides = std::move(allocation->strides);
  session.AddHandleWithId(id, allocation->slice, allocation->size);
  sessions_.Account(session, h.size, +1);
  return h;
}

absl::StatusOr<NewHandle> Device::CreateWithId(SessionId session, HandleId id,
                                               absl::Span<const uint8_t> data, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  ScopedTraceEvent trace(s->trace(), "memory");
  trace.set_name("create");
  trace.set_bytes(data.size());
  RETURN_IF_ERROR(CheckClientId(*s, id));
  RETURN_IF_ERROR(sessions_.CheckQuota(*s, data.size()));
  return AddHandleWithId(*s, id, server_->Create(data, s->memory_owner()));
}

absl::StatusOr<NewHandle> Device::CreateTensorWithId(SessionId session, HandleId id,
                                                     absl::Span<const uint8_t> data,
                                                     absl::Span<const uint64_t> shape,
                                                     uint32_t elem_size, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  ScopedTraceEvent trace(s->trace(), "memory");
  trace.set_name("create");
  trace.set_bytes(data.size());
  RETURN_IF_ERROR(CheckClientId(*s, id));
  RETURN_IF_ERROR(sessions_.CheckQuota(*s, data.size()));
  return AddHandleWithId(*s, id, server_->CreateTensor(data, shape, elem_size, s->memory_owner()));
}

absl::StatusOr<NewHandle> Device::EmptyWithId(SessionId session, HandleId id, uint64_t size,
                                              absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  ScopedTraceEvent trace(s->trace(), "memory");
  trace.set_name("empty");
  trace.set_bytes(size);
  RETURN_IF_ERROR(CheckClientId(*s, id));
  RETURN_IF_ERROR(sessions_.CheckQuota(*s, size));
  return AddHandleWithId(*s, id, server_->Empty(size, s->memory_owner()));
}

absl::StatusOr<NewHandle> Device::EmptyTensorWithId(SessionId session, HandleId id,
                                                    absl::Span<const uint64_t> shape,
                                                    uint32_t elem_size, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  ScopedTraceEvent trace(s->trace(), "memory");
  trace.set_name("empty");
  trace.set_bytes(0);
  RETURN_IF_ERROR(CheckClientId(*s, id));
  ASSIGN_OR_RETURN(const uint64_t bytes, TensorBytes(shape, elem_size, "shape"));
  RETURN_IF_ERROR(sessions_.CheckQuota(*s, bytes));
  return AddHandleWithId(*s, id, server_->EmptyTensor(shape, elem_size, s->memory_owner()));
}

void Device::PoisonId(SessionId session, HandleId id, absl::Status error) {
  if (Session* s = sessions_.Get(session)) s->Poison(id, MarkPoison(std::move(error)));
}

void Device::PoisonHandles(SessionId session, absl::Span<const HandleId> handles,
                           absl::Status error) {
  Session* s = sessions_.Get(session);
  if (s == nullptr) return;
  const absl::Status marked = MarkPoison(std::move(error));
  for (HandleId h : handles) {
    if (s->Find(h) != nullptr) s->Poison(h, marked);
  }
}

}  // namespace cubed
