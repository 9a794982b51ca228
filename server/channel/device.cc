#include "server/channel/device.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace cubed {
namespace {

absl::Status SessionNotFound(uint64_t session) {
  return absl::NotFoundError(
      absl::StrCat("session ", session, " is not open (closed, expired, or never opened)"));
}

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

Device::Device(uint32_t index, std::unique_ptr<ComputeServer> server, DeviceOptions options)
    : index_(index), server_(std::move(server)), options_(options) {}

Device::~Device() {
  for (auto& [id, session] : sessions_) CloseAll(*session);
  sessions_.clear();
}

absl::StatusOr<SessionGrant> Device::OpenSession(uint64_t lease_ms, absl::Time now,
                                                 PrincipalPtr owner) {
  absl::Duration lease = options_.default_lease;
  if (lease_ms != 0) {
    const uint64_t max_ms = absl::ToInt64Milliseconds(options_.max_lease);
    if (lease_ms > max_ms) {
      return absl::InvalidArgumentError(
          absl::StrCat("lease_ms: ", lease_ms, " ms is outside 1 .. ", max_ms, " (0: the default, ",
                       absl::ToInt64Milliseconds(options_.default_lease), " ms)"));
    }
    lease = absl::Milliseconds(static_cast<int64_t>(lease_ms));  // <= max_ms: fits.
  }
  if (owner != nullptr && owner->quotas.max_sessions != 0) {
    auto it = owners_.find(owner.get());
    const uint64_t open = it == owners_.end() ? 0 : it->second.sessions;
    if (open >= owner->quotas.max_sessions) {
      return absl::ResourceExhaustedError(
          absl::StrCat("quota max_sessions of principal '", owner->name, "' (",
                       owner->quotas.max_sessions, ") reached: close a session first"));
    }
  }
  uint64_t id;
  do {  // Random, unguessable, low byte = device index; never 0 above the low byte.
    id = (absl::Uniform<uint64_t>(random_) & ~uint64_t{0xff}) | index_;
  } while ((id >> 8) == 0 || sessions_.contains(id));
  if (owner != nullptr) ++owners_[owner.get()].sessions;
  const std::string owner_name = owner != nullptr ? owner->name : "-";
  // Note [Owner-tagged memory] (storage/memory_manager.cc): a fresh memory owner per session.
  sessions_.emplace(id, std::make_unique<Session>(id, lease, now, absl::Uniform<uint64_t>(random_),
                                                  next_memory_owner_++, std::move(owner)));
  spdlog::info("session {} opened on device {} by {} (lease {})", id, index_, owner_name,
               absl::FormatDuration(lease));
  return SessionGrant{id, lease};
}

void Device::CloseAll(Session& session) {
  if (session.profile().has_value()) {
    server_->EndProfile(*session.profile(), [](absl::StatusOr<absl::Duration>) {});
    session.profile().reset();
  }
  for (const auto& [handle, entry] : session.handles()) server_->Free(entry.slice);
  if (session.owner() == nullptr) return;
  auto it = owners_.find(session.owner().get());
  if (it == owners_.end()) return;
  it->second.sessions -= 1;
  it->second.handles -= session.handles().size();
  it->second.bytes -= session.bytes();
  if (it->second.sessions == 0 && it->second.handles == 0 && it->second.bytes == 0) {
    owners_.erase(it);
  }
}

bool Device::IsOwnedBy(uint64_t session, const Principal* principal) const {
  auto it = sessions_.find(session);
  return it != sessions_.end() && it->second->owner().get() == principal;
}

absl::Status Device::CheckQuota(const Session& session, uint64_t bytes) const {
  const Principal* owner = session.owner().get();
  if (owner == nullptr) return absl::OkStatus();
  const Quotas& q = owner->quotas;
  const std::string who = absl::StrCat(" of principal '", owner->name, "'");
  if (q.max_session_handles != 0 && session.handles().size() >= q.max_session_handles) {
    return absl::ResourceExhaustedError(
        absl::StrCat("quota max_session_handles", who, " (", q.max_session_handles,
                     ") reached: this session holds ", session.handles().size(), " handles"));
  }
  if (q.max_session_bytes != 0 &&
      (bytes > q.max_session_bytes || session.bytes() > q.max_session_bytes - bytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "quota max_session_bytes", who, " (", q.max_session_bytes, "): this session holds ",
        session.bytes(), " bytes and ", bytes, " more would exceed it"));
  }
  auto it = owners_.find(owner);
  const OwnerUsage usage = it == owners_.end() ? OwnerUsage{} : it->second;
  if (q.max_handles != 0 && usage.handles >= q.max_handles) {
    return absl::ResourceExhaustedError(absl::StrCat("quota max_handles", who, " (", q.max_handles,
                                                     ") reached over all its sessions"));
  }
  if (q.max_bytes != 0 && (bytes > q.max_bytes || usage.bytes > q.max_bytes - bytes)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("quota max_bytes", who, " (", q.max_bytes, "): its sessions hold ",
                     usage.bytes, " bytes and ", bytes, " more would exceed it"));
  }
  return absl::OkStatus();
}

void Device::Account(Session& session, uint64_t bytes, int sign) {
  if (sign > 0) {
    session.AddBytes(bytes);
  } else {
    session.SubtractBytes(bytes);
  }
  if (session.owner() == nullptr) return;
  OwnerUsage& usage = owners_[session.owner().get()];
  if (sign > 0) {
    usage.handles += 1;
    usage.bytes += bytes;
  } else {
    usage.handles -= 1;
    usage.bytes -= bytes;
  }
}

absl::StatusOr<uint64_t> Device::CloseSession(uint64_t session) {
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return SessionNotFound(session);
  const uint64_t released = it->second->handles().size();
  Session::ClosedCallback on_closed = it->second->take_on_closed();
  CloseAll(*it->second);
  sessions_.erase(it);
  spdlog::info("session {} closed ({} handles released)", session, released);
  if (on_closed != nullptr) {
    on_closed(absl::NotFoundError(
        absl::StrCat("session ", session, " was closed by a CloseSession call")));
  }
  return released;
}

size_t Device::ExpireSessions(absl::Time now) {
  std::vector<uint64_t> expired;
  for (const auto& [id, session] : sessions_) {
    if (session->expiry() <= now) expired.push_back(id);
  }
  for (uint64_t id : expired) {
    auto it = sessions_.find(id);
    const size_t handles = it->second->handles().size();
    const absl::Duration lease = it->second->lease();
    Session::ClosedCallback on_closed = it->second->take_on_closed();
    CloseAll(*it->second);
    sessions_.erase(it);
    spdlog::info("session {} expired ({} handles released)", id, handles);
    if (on_closed != nullptr) {
      on_closed(
          absl::NotFoundError(absl::StrCat("session ", id, " expired: its lease of ",
                                           absl::FormatDuration(lease), " passed without a call")));
    }
  }
  return expired.size();
}

absl::Status Device::WatchSession(uint64_t session, Session::ClosedCallback on_closed) {
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return SessionNotFound(session);
  it->second->set_on_closed(std::move(on_closed));
  return absl::OkStatus();
}

absl::Time Device::NextExpiry() const {
  absl::Time next = absl::InfiniteFuture();
  for (const auto& [id, session] : sessions_) next = std::min(next, session->expiry());
  return next;
}

uint64_t Device::handle_count() const {
  uint64_t n = 0;
  for (const auto& [id, session] : sessions_) n += session->handles().size();
  return n;
}

absl::StatusOr<Session*> Device::FindSession(uint64_t session, absl::Time now) {
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return SessionNotFound(session);
  it->second->Touch(now);
  return it->second.get();
}

absl::StatusOr<ResolvedBinding> Device::Resolve(Session& session, const BindingRef& ref,
                                                absl::string_view what) const {
  if (const absl::Status* poison = session.PoisonOf(ref.handle)) return *poison;
  const HandleEntry* entry = session.Find(ref.handle);
  if (entry == nullptr) {
    return absl::NotFoundError(
        absl::StrCat(what, ": handle ", ref.handle, " is not a handle of this session"));
  }
  if (ref.offset_start > entry->size) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": offset_start ", ref.offset_start,
                                                   " is past the end of handle ", ref.handle, " (",
                                                   entry->size, " bytes)"));
  }
  const uint64_t left = entry->size - ref.offset_start;
  if (ref.offset_end > left) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": offset_end ", ref.offset_end, " exceeds the ", left, " bytes of handle ",
        ref.handle, " left after offset_start ", ref.offset_start, " (size ", entry->size, ")"));
  }
  return ResolvedBinding{entry->slice, ref.offset_start, left - ref.offset_end};
}

absl::StatusOr<NewHandle> Device::AddHandle(Session& session,
                                            absl::StatusOr<Allocation> allocation) {
  if (!allocation.ok()) return allocation.status();
  if (absl::Status quota = CheckQuota(session, allocation->size); !quota.ok()) {
    server_->Free(allocation->slice);
    return quota;
  }
  NewHandle h;
  h.size = allocation->size;
  h.strides = std::move(allocation->strides);
  h.handle = session.AddHandle(allocation->slice, allocation->size);
  Account(session, h.size, +1);
  return h;
}

absl::StatusOr<NewHandle> Device::Create(uint64_t session, absl::Span<const uint8_t> data,
                                         absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  RETURN_IF_ERROR(CheckQuota(*s, data.size()));
  return AddHandle(*s, server_->Create(data, s->memory_owner()));
}

absl::StatusOr<NewHandle> Device::CreateTensor(uint64_t session, absl::Span<const uint8_t> data,
                                               absl::Span<const uint64_t> shape, uint32_t elem_size,
                                               absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  RETURN_IF_ERROR(CheckQuota(*s, data.size()));
  return AddHandle(*s, server_->CreateTensor(data, shape, elem_size, s->memory_owner()));
}

absl::StatusOr<NewHandle> Device::Empty(uint64_t session, uint64_t size, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  RETURN_IF_ERROR(CheckQuota(*s, size));
  return AddHandle(*s, server_->Empty(size, s->memory_owner()));
}

absl::StatusOr<NewHandle> Device::EmptyTensor(uint64_t session, absl::Span<const uint64_t> shape,
                                              uint32_t elem_size, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  ASSIGN_OR_RETURN(const uint64_t bytes, TensorBytes(shape, elem_size, "shape"));
  RETURN_IF_ERROR(CheckQuota(*s, bytes));
  return AddHandle(*s, server_->EmptyTensor(shape, elem_size, s->memory_owner()));
}

absl::Status Device::CheckReadBytes(uint64_t total) const {
  if (total <= options_.max_read_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "read of ", total, " bytes exceeds the ", options_.max_read_bytes,
      "-byte message limit (--max_message_bytes); read in parts (offsets), or use a bulk read"));
}

void Device::Read(uint64_t session, const std::vector<BindingRef>& bindings,
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
  server_->Read(*std::move(resolved), out, std::move(done));
}

void Device::ReadTensor(uint64_t session, const std::vector<TensorRef>& tensors,
                        std::vector<std::string>* out, absl::Time now, DoneCallback done) {
  auto resolve = [&]() -> absl::StatusOr<std::vector<ResolvedTensor>> {
    ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
    std::vector<ResolvedTensor> resolved;
    uint64_t total = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const std::string what = absl::StrCat("bindings[", i, "]");
      const TensorRef& t = tensors[i];
      ASSIGN_OR_RETURN(ResolvedBinding r, Resolve(*s, t.binding, what));
      RETURN_IF_ERROR(CheckTensorSpan(t, r.size, what));
      ASSIGN_OR_RETURN(const uint64_t bytes, TensorBytes(t.shape, t.elem_size, what));
      ASSIGN_OR_RETURN(total, CheckedSum(total, bytes, what));
      resolved.push_back(ResolvedTensor{r, t.shape, t.strides, t.elem_size});
    }
    RETURN_IF_ERROR(CheckReadBytes(total));
    return resolved;
  };
  absl::StatusOr<std::vector<ResolvedTensor>> resolved = resolve();
  if (!resolved.ok()) {
    done(resolved.status());
    return;
  }
  server_->ReadTensor(*std::move(resolved), out, std::move(done));
}

absl::Status Device::CheckBulkRead(uint64_t session, std::vector<TensorRef>& tensors, bool raw,
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

void Device::ReadPiece(uint64_t session, const TensorRef& piece, std::string* out, absl::Time now,
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

void Device::WritePiece(uint64_t session, uint64_t handle, absl::Span<const uint64_t> shape,
                        absl::Span<const uint64_t> strides, uint32_t elem_size,
                        uint64_t dense_offset, absl::Span<const uint8_t> bytes, absl::Time now,
                        DoneCallback done) {
  auto resolve = [&]() -> absl::StatusOr<ResolvedTensor> {
    ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
    ASSIGN_OR_RETURN(ResolvedBinding r, Resolve(*s, BindingRef{handle, 0, 0}, "id"));
    ASSIGN_OR_RETURN(const uint64_t total, TensorBytes(shape, elem_size, "id"));
    if (dense_offset > total || bytes.size() > total - dense_offset) {
      return absl::InvalidArgumentError(absl::StrCat("bytes [", dense_offset, ", +", bytes.size(),
                                                     ") exceed the ", total, " bytes of handle ",
                                                     handle));
    }
    return ResolvedTensor{r, std::vector<uint64_t>(shape.begin(), shape.end()),
                          std::vector<uint64_t>(strides.begin(), strides.end()), elem_size};
  };
  absl::StatusOr<ResolvedTensor> t = resolve();
  if (!t.ok()) {
    done(t.status());
    return;
  }
  server_->Write(*t, dense_offset, bytes, std::move(done));
}

absl::StatusOr<ResourceDescription> Device::GetResource(uint64_t session, const BindingRef& binding,
                                                        absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  ASSIGN_OR_RETURN(ResolvedBinding r, Resolve(*s, binding, "binding"));
  return server_->GetResource(r);
}

absl::Status Device::Execute(uint64_t session, ExecuteCommand command, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  if (command.unchecked && !options_.allow_unchecked) {
    return absl::PermissionDeniedError(
        "mode: unchecked execution is not allowed by this daemon (start it with "
        "--allow_unchecked)");
  }
  Launch launch;
  launch.kernel = std::move(command.kernel);
  launch.unchecked = command.unchecked;
  launch.count.dynamic = command.dynamic_count;
  if (command.dynamic_count) {
    ASSIGN_OR_RETURN(launch.count.binding, Resolve(*s, command.count_binding, "count.dynamic"));
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
    absl::StatusOr<ResolvedBinding> r = Resolve(*s, command.buffers[i], "bindings.buffers");
    if (!r.ok()) {  // Again, naming the index (built only on failure: none per command).
      return Resolve(*s, command.buffers[i], absl::StrCat("bindings.buffers[", i, "]")).status();
    }
    launch.buffers.push_back(*r);
  }
  return server_->Execute(std::move(launch));
}

absl::Status Device::Flush(uint64_t session, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  (void)s;
  return server_->Flush();
}

void Device::Sync(uint64_t session, absl::Time now, DoneCallback done) {
  absl::StatusOr<Session*> s = FindSession(session, now);
  if (!s.ok()) {
    done(s.status());
    return;
  }
  server_->Sync(std::move(done));
}

absl::Status Device::StartProfile(uint64_t session, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  if (s->profile().has_value()) {
    return absl::FailedPreconditionError(
        "StartProfile: a profile is already open in this session; call EndProfile first");
  }
  ASSIGN_OR_RETURN(ProfileToken token, server_->StartProfile());
  s->profile() = token;
  return absl::OkStatus();
}

void Device::EndProfile(uint64_t session, absl::Time now, DurationCallback done) {
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
  server_->EndProfile(token, std::move(done));
}

absl::Status Device::Release(uint64_t session, absl::Span<const uint64_t> handles, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  // Check first, so that one bad id releases nothing.
  absl::flat_hash_map<uint64_t, uint32_t> drops;
  for (size_t i = 0; i < handles.size(); ++i) {
    const HandleEntry* entry = s->Find(handles[i]);
    if (entry == nullptr && s->PoisonOf(handles[i]) != nullptr) {
      if (++drops[handles[i]] > 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("handles[", i, "]: poisoned id ", handles[i], " is released twice"));
      }
      continue;
    }
    if (entry == nullptr) {
      return absl::NotFoundError(absl::StrCat("handles[", i, "]: handle ", handles[i],
                                              " is not a handle of this session"));
    }
    if (++drops[handles[i]] > entry->refcount) {
      return absl::InvalidArgumentError(absl::StrCat("handles[", i, "]: handle ", handles[i],
                                                     " is released more times than it is held (",
                                                     entry->refcount, ")"));
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
      server_->Free(entry->slice);
      Account(*s, entry->size, -1);
      s->Erase(handle);
    }
  }
  return absl::OkStatus();
}

absl::Status Device::CheckClientId(const Session& session, uint64_t id) const {
  if (id < kFirstClientId) {
    return absl::InvalidArgumentError(absl::StrCat(
        "id: ", id, " is not a client id; client ids have the top bit set (>= ", kFirstClientId,
        ")"));
  }
  if (session.InUse(id)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "id: ", id, " is already in use in this session; release it before reusing it"));
  }
  return absl::OkStatus();
}

absl::Status Device::CheckClientId(uint64_t session, uint64_t id, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  return CheckClientId(*s, id);
}

absl::StatusOr<NewHandle> Device::AddHandleWithId(Session& session, uint64_t id,
                                                  absl::StatusOr<Allocation> allocation) {
  if (!allocation.ok()) return allocation.status();
  if (absl::Status quota = CheckQuota(session, allocation->size); !quota.ok()) {
    server_->Free(allocation->slice);
    return quota;
  }
  NewHandle h;
  h.handle = id;
  h.size = allocation->size;
  h.strides = std::move(allocation->strides);
  session.AddHandleWithId(id, allocation->slice, allocation->size);
  Account(session, h.size, +1);
  return h;
}

absl::StatusOr<NewHandle> Device::CreateWithId(uint64_t session, uint64_t id,
                                               absl::Span<const uint8_t> data, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  RETURN_IF_ERROR(CheckClientId(*s, id));
  RETURN_IF_ERROR(CheckQuota(*s, data.size()));
  return AddHandleWithId(*s, id, server_->Create(data, s->memory_owner()));
}

absl::StatusOr<NewHandle> Device::CreateTensorWithId(uint64_t session, uint64_t id,
                                                     absl::Span<const uint8_t> data,
                                                     absl::Span<const uint64_t> shape,
                                                     uint32_t elem_size, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  RETURN_IF_ERROR(CheckClientId(*s, id));
  RETURN_IF_ERROR(CheckQuota(*s, data.size()));
  return AddHandleWithId(*s, id, server_->CreateTensor(data, shape, elem_size, s->memory_owner()));
}

absl::StatusOr<NewHandle> Device::EmptyWithId(uint64_t session, uint64_t id, uint64_t size,
                                              absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  RETURN_IF_ERROR(CheckClientId(*s, id));
  RETURN_IF_ERROR(CheckQuota(*s, size));
  return AddHandleWithId(*s, id, server_->Empty(size, s->memory_owner()));
}

absl::StatusOr<NewHandle> Device::EmptyTensorWithId(uint64_t session, uint64_t id,
                                                    absl::Span<const uint64_t> shape,
                                                    uint32_t elem_size, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  RETURN_IF_ERROR(CheckClientId(*s, id));
  ASSIGN_OR_RETURN(const uint64_t bytes, TensorBytes(shape, elem_size, "shape"));
  RETURN_IF_ERROR(CheckQuota(*s, bytes));
  return AddHandleWithId(*s, id, server_->EmptyTensor(shape, elem_size, s->memory_owner()));
}

void Device::PoisonId(uint64_t session, uint64_t id, absl::Status error) {
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  it->second->Poison(id, MarkPoison(std::move(error)));
}

void Device::PoisonHandles(uint64_t session, absl::Span<const uint64_t> handles,
                           absl::Status error) {
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  const absl::Status marked = MarkPoison(std::move(error));
  for (uint64_t h : handles) {
    if (it->second->Find(h) != nullptr) it->second->Poison(h, marked);
  }
}

}  // namespace cubed
