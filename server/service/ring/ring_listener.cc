#include "server/service/ring/ring_listener.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/fd_passing.h"
#include "common/shm_ring.h"
#include "common/thread_name.h"
#include "cubed/v1/ring.pb.h"
#include "server/channel/shared_region.h"
#include "server/service/ring/ring_wire.h"
#include "spdlog/spdlog.h"

namespace cubed {
namespace {

constexpr size_t kMaxRequestBytes = 1024;  // ring.proto: a request is at most 1 KiB.
constexpr size_t kMaxDescriptors = 8;      // Received at most; all but one are refused.

}  // namespace

struct RingListener::Connection : SeqpacketPeer {
  explicit Connection(SeqpacketPeer accepted) : SeqpacketPeer(std::move(accepted)) {}
  std::unique_ptr<RingWire> wire;  // Set once the ring is open.
  ~Connection() {
    wire.reset();  // Stops its thread first.
    if (fd >= 0) close(fd);
  }
};

absl::StatusOr<std::unique_ptr<RingListener>> RingListener::Listen(const std::string& path,
                                                                   const std::string& group,
                                                                   RingListenerOptions options,
                                                                   const Authenticator* auth,
                                                                   SessionStreamService* streams) {
  std::unique_ptr<RingListener> l(new RingListener());
  absl::StatusOr<std::unique_ptr<SeqpacketListener>> socket =
      SeqpacketListener::Listen(path, group, "ring socket");
  if (!socket.ok()) return socket.status();
  l->socket_ = *std::move(socket);
  l->options_ = options;
  l->auth_ = auth;
  l->streams_ = streams;
  return l;
}

RingListener::~RingListener() { Stop(); }

void RingListener::Start() {
  thread_ = std::thread([this] { Serve(); });
}

void RingListener::Stop() {
  if (!thread_.joinable()) return;
  socket_->Wake();
  thread_.join();
}

void RingListener::Serve() {
  NameThisThread("cubed-ring-open");
  std::vector<std::unique_ptr<Connection>> connections;
  std::vector<pollfd> fds;
  for (;;) {
    // Rings whose stream finished: their connection closes, their memory is unmapped.
    for (size_t i = connections.size(); i-- > 0;) {
      if (connections[i]->wire != nullptr && connections[i]->wire->finished()) {
        connections.erase(connections.begin() + static_cast<ptrdiff_t>(i));
        open_rings_.fetch_sub(1, std::memory_order_relaxed);
      }
    }
    fds.clear();
    fds.push_back({socket_->wake_fd(), POLLIN, 0});
    fds.push_back({socket_->fd(), POLLIN, 0});
    for (const auto& c : connections) fds.push_back({c->fd, POLLIN, 0});
    // Finished rings are noticed within 100 ms; nothing to watch: sleep until woken.
    const int timeout = connections.empty() ? -1 : 100;
    if (poll(fds.data(), fds.size(), timeout) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("ring socket: poll: {}", std::strerror(errno));
      break;
    }
    if (fds[0].revents != 0) break;
    for (size_t i = connections.size(); i-- > 0;) {
      Connection& c = *connections[i];
      if (fds[i + 2].revents == 0) continue;
      if (c.wire != nullptr) {
        // After the request, anything on the connection (its close included) ends the ring.
        c.wire->Hangup();
        shutdown(c.fd, SHUT_RDWR);
        continue;  // Reaped once its stream finished.
      }
      if (!Open(c)) connections.erase(connections.begin() + static_cast<ptrdiff_t>(i));
    }
    if (fds[1].revents != 0) {
      if (std::optional<SeqpacketPeer> peer =
              socket_->Accept(connections.size(), options_.max_rings, *auth_)) {
        connections.push_back(std::make_unique<Connection>(*std::move(peer)));
      }
    }
  }
  open_rings_.store(0, std::memory_order_relaxed);
}

bool RingListener::Open(Connection& connection) {
  absl::StatusOr<ReceivedMessage> received =
      ReceiveWithDescriptors(connection.fd, kMaxRequestBytes, kMaxDescriptors, MSG_DONTWAIT);
  if (!received.ok() || received->closed) return false;
  if (received->again) return true;
  absl::Status opened;
  v1::OpenRingRequest request;
  if (received->truncated) {
    opened = absl::InvalidArgumentError(
        absl::StrCat("ring socket: a request is at most ", kMaxRequestBytes, " bytes"));
  } else if (received->fds_truncated || received->fds().size() != 1) {
    opened = absl::InvalidArgumentError(absl::StrCat(
        "ring socket: the request carries exactly one file descriptor (SCM_RIGHTS), not ",
        received->fds_truncated ? absl::StrCat("more than ", kMaxDescriptors)
                                : absl::StrCat(received->fds().size())));
  } else if (!request.ParseFromString(received->bytes)) {
    opened = absl::InvalidArgumentError(
        "ring socket: the request is not a serialized cubed.v1.OpenRingRequest");
  } else {
    opened = OpenRing(connection, received->Take(0));
  }
  if (!opened.ok()) {
    v1::OpenRingResponse response;
    response.set_code(static_cast<int32_t>(opened.code()));
    response.set_message(std::string(opened.message()));
    (void)SendWithDescriptors(connection.fd, response.SerializeAsString(), {}, "ring socket");
    return false;
  }
  return true;
}

absl::Status RingListener::OpenRing(Connection& connection, int memfd) {
  if (!connection.principal.ok()) {
    close(memfd);
    return connection.principal.status();
  }
  const PrincipalPtr& principal = *connection.principal;
  if (principal != nullptr) {
    if (absl::Status s = principal->CheckRpc("OpenSession"); !s.ok()) {
      close(memfd);
      return s;
    }
  }
  absl::StatusOr<std::unique_ptr<SharedRegion>> file =
      SharedRegion::Map(memfd, options_.max_ring_bytes);  // Takes memfd.
  if (!file.ok()) {
    return absl::Status(file.status().code(),
                        absl::StrCat("command ring: ", file.status().message()));
  }
  absl::StatusOr<RingMemory> memory = ReadRingHeader((*file)->bytes().data(), (*file)->size());
  if (!memory.ok()) return memory.status();
  int doorbells[3];
  for (int i = 0; i < 3; ++i) {
    doorbells[i] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (doorbells[i] < 0) {
      const int error = errno;
      for (int j = 0; j < i; ++j) close(doorbells[j]);
      return absl::ResourceExhaustedError(
          absl::StrCat("command ring: eventfd: ", std::strerror(error)));
    }
  }
  RingWireOptions wire_options;
  wire_options.max_request_bytes = options_.max_request_bytes;
  wire_options.spin = options_.spin;
  connection.wire = std::make_unique<RingWire>(*std::move(file), *memory, doorbells[0],
                                               doorbells[1], doorbells[2], wire_options);
  open_rings_.fetch_add(1, std::memory_order_relaxed);
  rings_opened_.fetch_add(1, std::memory_order_relaxed);
  v1::OpenRingResponse response;
  response.set_spin_us(static_cast<uint32_t>(absl::ToInt64Microseconds(options_.spin)));
  // Answered before the stream starts, so that the client holds its doorbells before anything
  // rings them; a client that cannot take the answer gets no ring.
  if (absl::Status sent = SendWithDescriptors(connection.fd, response.SerializeAsString(),
                                              doorbells, "ring socket");
      !sent.ok()) {
    connection.wire->Hangup();
  }
  connection.wire->Start(streams_->Attach(connection.wire.get(), principal));
  spdlog::debug("command ring ({} + {} bytes) opened by pid {}", memory->command_capacity,
                memory->reply_capacity, connection.peer.pid);
  return absl::OkStatus();
}

}  // namespace cubed
