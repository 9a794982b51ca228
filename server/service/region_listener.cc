#include "server/service/region_listener.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/fd_passing.h"
#include "cubed/v1/region.pb.h"
#include "server/channel/device.h"
#include "server/channel/shared_region.h"
#include "spdlog/spdlog.h"

namespace cubed {
namespace {

constexpr size_t kMaxRequestBytes = 1024;  // region.proto: a request is at most 1 KiB.
constexpr size_t kMaxDescriptors = 8;      // Received at most; all but one are refused.

absl::Status SessionNotOpen(uint64_t session) {
  return absl::NotFoundError(
      absl::StrCat("session ", session, " is not open (closed, expired, or never opened)"));
}

}  // namespace

struct RegionListener::Connection : SeqpacketPeer {};

absl::StatusOr<std::unique_ptr<RegionListener>> RegionListener::Listen(
    const std::string& path, const std::string& group, RegionListenerOptions options,
    const Authenticator* auth, std::vector<DeviceLoop*> loops) {
  std::unique_ptr<RegionListener> l(new RegionListener());
  absl::StatusOr<std::unique_ptr<SeqpacketListener>> socket =
      SeqpacketListener::Listen(path, group, "region socket");
  if (!socket.ok()) return socket.status();
  l->socket_ = *std::move(socket);
  l->options_ = options;
  l->auth_ = auth;
  l->loops_ = std::move(loops);
  return l;
}

RegionListener::~RegionListener() { Stop(); }

void RegionListener::Start() {
  thread_ = std::thread([this] { Serve(); });
}

void RegionListener::Stop() {
  if (!thread_.joinable()) return;
  socket_->Wake();
  thread_.join();
}

void RegionListener::Serve() {
  std::vector<Connection> connections;
  std::vector<pollfd> fds;
  for (;;) {
    fds.clear();
    fds.push_back({socket_->wake_fd(), POLLIN, 0});
    fds.push_back({socket_->fd(), POLLIN, 0});
    for (const Connection& c : connections) fds.push_back({c.fd, POLLIN, 0});
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("region socket: poll: {}", std::strerror(errno));
      break;
    }
    if (fds[0].revents != 0) break;
    // Connections first (their indices match fds from 2 on), then new ones.
    for (size_t i = connections.size(); i-- > 0;) {
      if (fds[i + 2].revents == 0) continue;
      if (!Answer(connections[i])) {
        close(connections[i].fd);
        connections.erase(connections.begin() + static_cast<ptrdiff_t>(i));
      }
    }
    if (fds[1].revents != 0) {
      if (std::optional<SeqpacketPeer> peer =
              socket_->Accept(connections.size(), options_.max_connections, *auth_)) {
        connections.push_back(Connection{*std::move(peer)});
      }
    }
  }
  for (const Connection& c : connections) close(c.fd);
}

bool RegionListener::Answer(Connection& connection) {
  absl::StatusOr<ReceivedMessage> received =
      ReceiveWithDescriptors(connection.fd, kMaxRequestBytes, kMaxDescriptors, MSG_DONTWAIT);
  if (!received.ok() || received->closed) return false;  // Broken, or the client closed its end.
  if (received->again) return true;
  absl::StatusOr<std::pair<uint64_t, uint64_t>> registered;
  v1::RegisterRegionRequest parsed;
  if (received->truncated) {
    registered = absl::InvalidArgumentError(
        absl::StrCat("region socket: a request is at most ", kMaxRequestBytes, " bytes"));
  } else if (received->fds_truncated || received->fds().size() != 1) {
    registered = absl::InvalidArgumentError(absl::StrCat(
        "region socket: a request carries exactly one file descriptor (SCM_RIGHTS), not ",
        received->fds_truncated ? absl::StrCat("more than ", kMaxDescriptors)
                                : absl::StrCat(received->fds().size())));
  } else if (!parsed.ParseFromString(received->bytes)) {
    registered = absl::InvalidArgumentError(
        "region socket: the request is not a serialized cubed.v1.RegisterRegionRequest");
  } else {
    registered = Register(connection, parsed.session(), received->Take(0));  // Takes it.
  }

  v1::RegisterRegionResponse response;
  if (registered.ok()) {
    response.set_region(registered->first);
    response.set_size(registered->second);
  } else {
    response.set_code(static_cast<int32_t>(registered.status().code()));
    response.set_message(std::string(registered.status().message()));
  }
  const std::string reply = response.SerializeAsString();
  // Not waiting for a client that does not read: its connection ends instead.
  return send(connection.fd, reply.data(), reply.size(), MSG_DONTWAIT | MSG_NOSIGNAL) ==
         static_cast<ssize_t>(reply.size());
}

absl::StatusOr<std::pair<uint64_t, uint64_t>> RegionListener::Register(const Connection& connection,
                                                                       uint64_t session, int fd) {
  if (!connection.principal.ok()) {
    close(fd);
    return connection.principal.status();
  }
  const SessionId id(session);
  const uint32_t device = DeviceOfSession(id);
  if (device >= loops_.size()) {
    close(fd);
    return SessionNotOpen(session);
  }
  absl::StatusOr<std::unique_ptr<SharedRegion>> region =
      SharedRegion::Map(fd, options_.max_region_bytes);  // Takes fd.
  if (!region.ok()) return region.status();
  const uint64_t size = (*region)->size();

  absl::StatusOr<RegionId> registered = absl::UnknownError("not registered");
  absl::Notification done;
  const PrincipalPtr& principal = *connection.principal;
  const bool posted = loops_[device]->Post(
      [&, region = *std::move(region)](Device& d) mutable {
        // Note [Session ownership] (device.h): another principal's session looks unknown.
        if (!d.IsOwnedBy(id, principal.get())) {
          registered = SessionNotOpen(session);
          region.reset();  // Unmapped before the answer, not when the loop drops the task.
        } else {
          registered = d.RegisterRegion(id, std::move(region), absl::Now());
        }
        done.Notify();
      },
      [&](absl::Status error) {  // Note [Loop task exceptions].
        registered = std::move(error);
        done.Notify();
      });
  if (!posted) return absl::UnavailableError("the daemon is shutting down");
  done.WaitForNotification();
  if (!registered.ok()) return registered.status();
  spdlog::debug("region {} ({} bytes) registered for session {} by pid {}", registered->value(),
                size, session, connection.peer.pid);
  return std::make_pair(registered->value(), size);
}

}  // namespace cubed
