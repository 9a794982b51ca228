#include "server/channel/session_table.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace cubed {

absl::Status SessionNotFound(SessionId session) {
  return absl::NotFoundError(
      absl::StrCat("session ", session.value(), " is not open (closed, expired, or never opened)"));
}

SessionTable::SessionTable(uint32_t device_index, absl::Duration default_lease,
                           absl::Duration max_lease)
    : device_index_(device_index), default_lease_(default_lease), max_lease_(max_lease) {}

absl::StatusOr<Session*> SessionTable::Open(uint64_t lease_ms, absl::Time now, PrincipalPtr owner) {
  absl::Duration lease = default_lease_;
  if (lease_ms != 0) {
    const uint64_t max_ms = absl::ToInt64Milliseconds(max_lease_);
    if (lease_ms > max_ms) {
      return absl::InvalidArgumentError(
          absl::StrCat("lease_ms: ", lease_ms, " ms is outside 1 .. ", max_ms, " (0: the default, ",
                       absl::ToInt64Milliseconds(default_lease_), " ms)"));
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
  SessionId id;
  do {  // Random, unguessable, low byte = device index; never 0 above the low byte.
    id = SessionId((absl::Uniform<uint64_t>(random_) & ~uint64_t{0xff}) | device_index_);
  } while ((id.value() >> 8) == 0 || sessions_.contains(id));
  if (owner != nullptr) ++owners_[owner.get()].sessions;
  const std::string owner_name = owner != nullptr ? owner->name : "-";
  // Note [Owner-tagged memory] (storage/memory_manager.cc): a fresh memory owner per session.
  auto session = std::make_unique<Session>(id, lease, now, absl::Uniform<uint64_t>(random_),
                                           next_memory_owner_++, std::move(owner));
  Session* opened = session.get();
  sessions_.emplace(id, std::move(session));
  spdlog::info("session {} opened on device {} by {} (lease {})", id.value(), device_index_,
               owner_name, absl::FormatDuration(lease));
  return opened;
}

absl::StatusOr<Session*> SessionTable::Restore(SessionId id, absl::Duration lease, absl::Time now,
                                               PrincipalPtr owner) {
  if ((id.value() & 0xff) != device_index_ || (id.value() >> 8) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("session ", id.value(), ": not a session id of device ", device_index_));
  }
  if (lease <= absl::ZeroDuration() || lease > max_lease_) {
    return absl::InvalidArgumentError(absl::StrCat("session ", id.value(), ": lease ",
                                                   absl::FormatDuration(lease), " is outside (0, ",
                                                   absl::FormatDuration(max_lease_), "]"));
  }
  if (sessions_.contains(id)) {
    return absl::FailedPreconditionError(absl::StrCat("session ", id.value(), " is open already"));
  }
  if (owner != nullptr) ++owners_[owner.get()].sessions;
  const std::string owner_name = owner != nullptr ? owner->name : "-";
  auto session = std::make_unique<Session>(id, lease, now, absl::Uniform<uint64_t>(random_),
                                           next_memory_owner_++, std::move(owner));
  Session* restored = session.get();
  sessions_.emplace(id, std::move(session));
  spdlog::info("session {} restored on device {} for {} (lease {})", id.value(), device_index_,
               owner_name, absl::FormatDuration(lease));
  return restored;
}

absl::StatusOr<Session*> SessionTable::Find(SessionId id, absl::Time now) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return SessionNotFound(id);
  it->second->Touch(now);
  return it->second.get();
}

Session* SessionTable::Get(SessionId id) const {
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : it->second.get();
}

std::unique_ptr<Session> SessionTable::Remove(SessionId id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return nullptr;
  std::unique_ptr<Session> session = std::move(it->second);
  sessions_.erase(it);
  if (session->owner() != nullptr) {
    auto usage = owners_.find(session->owner().get());
    if (usage != owners_.end()) {
      usage->second.sessions -= 1;
      // Orphans (Note [Recorded graphs]) stay accounted as handles until they are freed.
      usage->second.handles -= session->handles().size() + session->Orphans().size();
      usage->second.bytes -= session->bytes();
      if (usage->second.sessions == 0 && usage->second.handles == 0 && usage->second.bytes == 0) {
        owners_.erase(usage);
      }
    }
  }
  return session;
}

std::vector<SessionId> SessionTable::Expired(absl::Time now) const {
  std::vector<SessionId> expired;
  for (const auto& [id, session] : sessions_) {
    if (session->expiry() <= now) expired.push_back(id);
  }
  return expired;
}

absl::Time SessionTable::NextExpiry() const {
  absl::Time next = absl::InfiniteFuture();
  for (const auto& [id, session] : sessions_) next = std::min(next, session->expiry());
  return next;
}

bool SessionTable::IsOwnedBy(SessionId id, const Principal* principal) const {
  const Session* session = Get(id);
  return session != nullptr && session->owner().get() == principal;
}

uint64_t SessionTable::handle_count() const {
  uint64_t n = 0;
  for (const auto& [id, session] : sessions_) n += session->handles().size();
  return n;
}

void SessionTable::ForEach(absl::FunctionRef<void(const Session&)> visit) const {
  for (const auto& [id, session] : sessions_) visit(*session);
}

uint64_t SessionTable::region_count() const {
  uint64_t n = 0;
  for (const auto& [id, session] : sessions_) n += session->regions().size();
  return n;
}

std::vector<SessionId> SessionTable::ids() const {
  std::vector<SessionId> out;
  out.reserve(sessions_.size());
  for (const auto& [id, session] : sessions_) out.push_back(id);
  return out;
}

absl::Status SessionTable::CheckQuota(const Session& session, uint64_t bytes) const {
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

void SessionTable::Account(Session& session, uint64_t bytes, int sign) {
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

}  // namespace cubed
