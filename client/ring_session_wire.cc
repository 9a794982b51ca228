#include "client/ring_session_wire.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/fd_passing.h"
#include "common/spin_wait.h"
#include "cubed/v1/ring.pb.h"

namespace cubed {
namespace {

constexpr absl::Duration kMaxSpin = absl::Milliseconds(1);

}  // namespace

absl::StatusOr<std::unique_ptr<RingSessionWire>> RingSessionWire::Open(
    const std::string& ring_socket, RingSessionWireOptions options) {
  absl::StatusOr<uint64_t> bytes = RingFileBytes(options.command_capacity, options.reply_capacity);
  if (!bytes.ok()) return bytes.status();
  std::unique_ptr<RingSessionWire> w(new RingSessionWire());
  absl::StatusOr<SharedMemory> file = SharedMemory::Create(*bytes, "cubed-ring");
  if (!file.ok()) return file.status();
  w->file_.emplace(*std::move(file));
  w->memory_ =
      RingMemory{w->file_->bytes().data(), options.command_capacity, options.reply_capacity};
  InitRingHeader(w->memory_);

  absl::StatusOr<int> sock = ConnectSeqpacket(ring_socket, "ring socket");
  if (!sock.ok()) return sock.status();
  w->socket_ = *sock;
  v1::OpenRingRequest request;
  request.set_client("cubed-cpp");
  const int memfd = w->file_->fd();
  if (absl::Status s = SendWithDescriptors(w->socket_, request.SerializeAsString(),
                                           absl::MakeConstSpan(&memfd, 1), "ring socket");
      !s.ok()) {
    return s;
  }
  pollfd fd{w->socket_, POLLIN, 0};
  const int ready = poll(&fd, 1, static_cast<int>(absl::ToInt64Milliseconds(options.open_timeout)));
  if (ready <= 0) {
    return absl::UnavailableError(absl::StrCat("ring socket ", ring_socket,
                                               ": no answer to the open within ",
                                               absl::FormatDuration(options.open_timeout)));
  }
  absl::StatusOr<ReceivedMessage> answer = ReceiveWithDescriptors(w->socket_, 4096, 4, 0);
  if (!answer.ok()) return answer.status();
  if (answer->closed) {
    return absl::UnavailableError(
        absl::StrCat("ring socket ", ring_socket, ": the daemon closed the connection"));
  }
  v1::OpenRingResponse response;
  if (answer->truncated || !response.ParseFromString(answer->bytes)) {
    return absl::InternalError("ring socket: the daemon's answer does not parse");
  }
  if (response.code() != 0) {
    const absl::StatusCode code = response.code() >= 1 && response.code() <= 16
                                      ? static_cast<absl::StatusCode>(response.code())
                                      : absl::StatusCode::kUnknown;
    return absl::Status(code, response.message());
  }
  if (answer->fds().size() != 3) {
    return absl::InternalError(absl::StrCat("ring socket: the daemon's answer carries ",
                                            answer->fds().size(), " descriptors, not 3"));
  }
  w->daemon_doorbell_ = answer->Take(0);
  w->reply_doorbell_ = answer->Take(1);
  w->space_doorbell_ = answer->Take(2);
  w->spin_ = std::min(absl::Microseconds(response.spin_us()), kMaxSpin);
  const RingMemory& m = w->memory_;
  w->commands_ = RingWriter(m.command_data(), m.command_capacity, m.word64(kCommandTailAt),
                            m.word64(kCommandHeadAt));
  w->replies_ = RingReader(m.reply_data(), m.reply_capacity, m.word64(kReplyTailAt),
                           m.word64(kReplyHeadAt), options.max_response_bytes);
  return w;
}

RingSessionWire::~RingSessionWire() {
  for (int fd : {socket_, daemon_doorbell_, reply_doorbell_, space_doorbell_}) {
    if (fd >= 0) close(fd);
  }
}

void RingSessionWire::RingDaemon() {
  if (TakeWaiting(memory_.word32(kDaemonWaitingAt))) RingDoorbell(daemon_doorbell_);
}

template <typename Ready>
bool RingSessionWire::Wait(int doorbell, RingOffset waiting, Ready ready) {
  SpinUntil(spin_, [&] {  // Note [Spin checks].
    return ready() || cancelled_.load(std::memory_order_relaxed);
  });
  for (;;) {
    if (cancelled_.load(std::memory_order_acquire)) return false;
    StoreWaiting(memory_.word32(waiting), 1);
    if (ready()) {
      StoreWaiting(memory_.word32(waiting), 0);
      return true;
    }
    pollfd fds[2] = {{doorbell, POLLIN, 0}, {socket_, POLLIN, 0}};
    const int n = poll(fds, 2, 1000);
    StoreWaiting(memory_.word32(waiting), 0);
    if (n > 0 && (fds[0].revents & POLLIN) != 0) DrainDoorbell(doorbell);
    if (ready()) return true;
    // The daemon sends nothing after its answer: anything on the connection is its end.
    if (n > 0 && fds[1].revents != 0) return false;
  }
}

bool RingSessionWire::Append(RingChunk kind, absl::string_view bytes) {
  if (write_broken_) return false;
  absl::string_view rest = bytes;
  for (;;) {
    const uint64_t tail = commands_.tail();
    absl::StatusOr<bool> done = commands_.Append(kind, rest);
    if (!done.ok()) {
      write_broken_ = true;
      return false;
    }
    if (commands_.tail() != tail) RingDaemon();
    if (*done) return true;
    const bool room = Wait(space_doorbell_, kClientSpaceWaitingAt, [&] {
      return memory_.command_capacity - commands_.Pending() >= kMinChunkRoom;
    });
    if (!room) {
      write_broken_ = true;
      return false;
    }
  }
}

bool RingSessionWire::Write(const v1::SessionRequest& request) {
  if (!request.SerializeToString(&write_buffer_)) return false;
  return Append(RingChunk::kRequest, write_buffer_);
}

bool RingSessionWire::WriteSerialized(absl::string_view request) {
  return Append(RingChunk::kRequest, request);
}

void RingSessionWire::WritesDone() { (void)Append(RingChunk::kRequestsDone, {}); }

bool RingSessionWire::Read(v1::SessionResponse* response) {
  while (!ended_) {
    const uint64_t head = replies_.head();
    RingChunk kind = RingChunk::kResponse;
    absl::StatusOr<bool> got = replies_.Next(&read_buffer_, &kind);
    if (replies_.head() != head) RingDaemon();  // It may wait for room for a reply.
    if (!got.ok()) {
      end_ = got.status();
      ended_ = true;
      break;
    }
    if (*got) {
      if (kind == RingChunk::kResponse) {
        const bool parsed = response->ParseFromString(read_buffer_);
        read_buffer_.clear();
        if (parsed) return true;
        end_ = absl::InternalError("command ring: a reply does not parse as a SessionResponse");
      } else if (kind == RingChunk::kEnd) {
        v1::RingEnd end;
        if (!end.ParseFromString(read_buffer_)) {
          end_ = absl::InternalError("command ring: the end record does not parse");
        } else if (end.code() != 0) {
          const absl::StatusCode code = end.code() >= 1 && end.code() <= 16
                                            ? static_cast<absl::StatusCode>(end.code())
                                            : absl::StatusCode::kUnknown;
          end_ = absl::Status(code, end.message());
        }
      } else {
        end_ = absl::DataLossError("command ring: a request chunk in the reply ring");
      }
      ended_ = true;
      break;
    }
    if (!Wait(reply_doorbell_, kClientReplyWaitingAt, [&] { return replies_.HasPublished(); })) {
      end_ = cancelled_.load()
                 ? absl::CancelledError("the stream was cancelled")
                 : absl::UnavailableError("command ring: the daemon closed the ring's connection");
      ended_ = true;
    }
  }
  return false;
}

absl::Status RingSessionWire::Finish() {
  if (!ended_) return absl::CancelledError("SessionStream: the stream was cancelled");
  if (end_.ok()) return end_;
  return absl::Status(end_.code(), absl::StrCat("SessionStream: ", end_.message()));
}

void RingSessionWire::Cancel() {
  cancelled_.store(true, std::memory_order_release);
  shutdown(socket_, SHUT_RDWR);  // The daemon ends the stream; local waiters see the hang-up.
}

}  // namespace cubed
