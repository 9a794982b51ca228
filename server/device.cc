#include "server/device.h"

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
  return absl::NotFoundError(absl::StrCat("session ", session,
                                          " is not open (closed, expired, or never opened)"));
}

// Note [Poisoned handles] (session.h): the payload marks the error as a poison.
absl::Status MarkPoison(absl::Status error) {
  error.SetPayload(kPoisonPayload, absl::Cord("1"));
  return error;
}

}  // namespace

Device::Device(uint32_t index, std::unique_ptr<ComputeServer> server, DeviceOptions options)
    : index_(index), server_(std::move(server)), options_(options) {}

Device::~Device() {
  for (auto& [id, session] : sessions_) CloseAll(*session);
  sessions_.clear();
}

absl::StatusOr<SessionGrant> Device::OpenSession(absl::Duration lease, absl::Time now) {
  if (lease == absl::ZeroDuration()) lease = options_.default_lease;
  if (lease < absl::ZeroDuration() || lease > options_.max_lease) {
    return absl::InvalidArgumentError(absl::StrCat("lease_ms: ", absl::ToInt64Milliseconds(lease),
                                                   " ms is outside 1 .. ",
                                                   absl::ToInt64Milliseconds(options_.max_lease)));
  }
  uint64_t id;
  do {  // Random, unguessable, low byte = device index; never 0 above the low byte.
    id = (absl::Uniform<uint64_t>(random_) & ~uint64_t{0xff}) | index_;
  } while ((id >> 8) == 0 || sessions_.contains(id));
  sessions_.emplace(id, std::make_unique<Session>(id, lease, now, absl::Uniform<uint64_t>(random_)));
  spdlog::info("session {} opened on device {} (lease {})", id, index_, absl::FormatDuration(lease));
  return SessionGrant{id, lease};
}

void Device::CloseAll(Session& session) {
  if (session.profile().has_value()) {
    server_->EndProfile(*session.profile(), [](absl::StatusOr<absl::Duration>) {});
    session.profile().reset();
  }
  for (const auto& [handle, entry] : session.handles()) server_->Free(entry.slice);
}

absl::StatusOr<uint64_t> Device::CloseSession(uint64_t session) {
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return SessionNotFound(session);
  const uint64_t released = it->second->handles().size();
  CloseAll(*it->second);
  sessions_.erase(it);
  spdlog::info("session {} closed ({} handles released)", session, released);
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
    CloseAll(*it->second);
    sessions_.erase(it);
    spdlog::info("session {} expired ({} handles released)", id, handles);
  }
  return expired.size();
}

absl::Time Device::NextExpiry() const {
  absl::Time next = absl::InfiniteFuture();
  for (const auto& [id, session] : sessions_) next = std::min(next, session->expiry());
  return next;
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
                                                   " is past the end of handle ", ref.handle,
                                                   " (", entry->size, " bytes)"));
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
  NewHandle h;
  h.size = allocation->size;
  h.strides = std::move(allocation->strides);
  h.handle = session.AddHandle(allocation->slice, allocation->size);
  return h;
}

absl::StatusOr<NewHandle> Device::Create(uint64_t session, absl::Span<const uint8_t> data,
                                         absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  return AddHandle(*s, server_->Create(data));
}

absl::StatusOr<NewHandle> Device::CreateTensor(uint64_t session, absl::Span<const uint8_t> data,
                                               absl::Span<const uint64_t> shape,
                                               uint32_t elem_size, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  return AddHandle(*s, server_->CreateTensor(data, shape, elem_size));
}

absl::StatusOr<NewHandle> Device::Empty(uint64_t session, uint64_t size, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  return AddHandle(*s, server_->Empty(size));
}

absl::StatusOr<NewHandle> Device::EmptyTensor(uint64_t session, absl::Span<const uint64_t> shape,
                                              uint32_t elem_size, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  return AddHandle(*s, server_->EmptyTensor(shape, elem_size));
}

void Device::Read(uint64_t session, const std::vector<BindingRef>& bindings,
                  std::vector<std::string>* out, absl::Time now, DoneCallback done) {
  auto resolve = [&]() -> absl::StatusOr<std::vector<ResolvedBinding>> {
    ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
    std::vector<ResolvedBinding> resolved;
    resolved.reserve(bindings.size());
    uint64_t total = 0;
    for (size_t i = 0; i < bindings.size(); ++i) {
      ASSIGN_OR_RETURN(ResolvedBinding r,
                       Resolve(*s, bindings[i], absl::StrCat("bindings[", i, "]")));
      total += r.size;  // Sizes are bounded by allocations: no overflow.
      resolved.push_back(r);
    }
    if (total > options_.max_read_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "read of ", total, " bytes exceeds the ", options_.max_read_bytes,
          "-byte message limit (--max_message_bytes); read in parts using offsets"));
    }
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
      ASSIGN_OR_RETURN(ResolvedBinding r, Resolve(*s, tensors[i].binding, what));
      const TensorRef& t = tensors[i];
      // Bytes the layout addresses: (1 + sum((shape - 1) * stride)) * elem_size.
      uint64_t span = 1;
      for (size_t d = 0; d < t.shape.size(); ++d) {
        std::optional<uint64_t> extent = CheckedMul(t.shape[d] - 1, t.strides[d]);
        std::optional<uint64_t> next = extent ? CheckedAdd(span, *extent) : std::nullopt;
        if (!next) return absl::InvalidArgumentError(absl::StrCat(what, ": layout overflows"));
        span = *next;
      }
      std::optional<uint64_t> span_bytes = CheckedMul(span, t.elem_size);
      if (!span_bytes || *span_bytes > r.size) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": shape and strides address ", span_bytes ? *span_bytes : UINT64_MAX,
            " bytes but the binding holds ", r.size));
      }
      total += CheckedProduct(t.shape).value_or(0) * t.elem_size;
      resolved.push_back(ResolvedTensor{r, t.shape, t.strides, t.elem_size});
    }
    if (total > options_.max_read_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "read of ", total, " bytes exceeds the ", options_.max_read_bytes,
          "-byte message limit (--max_message_bytes); read in parts"));
    }
    return resolved;
  };
  absl::StatusOr<std::vector<ResolvedTensor>> resolved = resolve();
  if (!resolved.ok()) {
    done(resolved.status());
    return;
  }
  server_->ReadTensor(*std::move(resolved), out, std::move(done));
}

absl::StatusOr<ResourceDescription> Device::GetResource(uint64_t session,
                                                        const BindingRef& binding,
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
        return absl::InvalidArgumentError(absl::StrCat(
            "count.static_count.", std::string(1, "xyz"[i]), " = ", command.count[i],
            " is outside 1 .. ", d.max_cube_count[i]));
      }
    }
    launch.count.x = command.count[0];
    launch.count.y = command.count[1];
    launch.count.z = command.count[2];
  }
  launch.buffers.reserve(command.buffers.size());
  for (size_t i = 0; i < command.buffers.size(); ++i) {
    ASSIGN_OR_RETURN(ResolvedBinding r, Resolve(*s, command.buffers[i],
                                                 absl::StrCat("bindings.buffers[", i, "]")));
    launch.buffers.push_back(r);
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

absl::Status Device::Release(uint64_t session, absl::Span<const uint64_t> handles,
                             absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  // Check first, so that one bad id releases nothing.
  absl::flat_hash_map<uint64_t, uint32_t> drops;
  for (size_t i = 0; i < handles.size(); ++i) {
    const HandleEntry* entry = s->Find(handles[i]);
    if (entry == nullptr && s->PoisonOf(handles[i]) != nullptr) {
      if (++drops[handles[i]] > 1) {
        return absl::InvalidArgumentError(absl::StrCat("handles[", i, "]: poisoned id ",
                                                       handles[i], " is released twice"));
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
  NewHandle h;
  h.handle = id;
  h.size = allocation->size;
  h.strides = std::move(allocation->strides);
  session.AddHandleWithId(id, allocation->slice, allocation->size);
  return h;
}

absl::StatusOr<NewHandle> Device::CreateWithId(uint64_t session, uint64_t id,
                                               absl::Span<const uint8_t> data, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  RETURN_IF_ERROR(CheckClientId(*s, id));
  return AddHandleWithId(*s, id, server_->Create(data));
}

absl::StatusOr<NewHandle> Device::CreateTensorWithId(uint64_t session, uint64_t id,
                                                     absl::Span<const uint8_t> data,
                                                     absl::Span<const uint64_t> shape,
                                                     uint32_t elem_size, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  RETURN_IF_ERROR(CheckClientId(*s, id));
  return AddHandleWithId(*s, id, server_->CreateTensor(data, shape, elem_size));
}

absl::StatusOr<NewHandle> Device::EmptyWithId(uint64_t session, uint64_t id, uint64_t size,
                                              absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  RETURN_IF_ERROR(CheckClientId(*s, id));
  return AddHandleWithId(*s, id, server_->Empty(size));
}

absl::StatusOr<NewHandle> Device::EmptyTensorWithId(uint64_t session, uint64_t id,
                                                    absl::Span<const uint64_t> shape,
                                                    uint32_t elem_size, absl::Time now) {
  ASSIGN_OR_RETURN(Session * s, FindSession(session, now));
  RETURN_IF_ERROR(CheckClientId(*s, id));
  return AddHandleWithId(*s, id, server_->EmptyTensor(shape, elem_size));
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
