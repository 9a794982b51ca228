#include "server/service/ring/ring_wire.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/spin_wait.h"
#include "common/thread_name.h"
#include "cubed/v1/ring.pb.h"

namespace cubed {
namespace {

// Requests already in the ring are merged into one read up to this many commands (Note
// [Command ring]: a client may write each command as its own request).
constexpr int kMergeCommands = 256;

// A request the decoder refused, as the ring reports it.
absl::Status CommandRingError(const absl::Status& refused) {
  return absl::Status(refused.code(), absl::StrCat("command ring: ", refused.message()));
}

}  // namespace

RingWire::RingWire(std::unique_ptr<SharedRegion> file, RingMemory memory, int daemon_doorbell,
                   int reply_doorbell, int space_doorbell, RingWireOptions options)
    : file_(std::move(file)),
      memory_(memory),
      daemon_doorbell_(daemon_doorbell),
      reply_doorbell_(reply_doorbell),
      space_doorbell_(space_doorbell),
      options_(options),
      commands_(memory.command_data(), memory.command_capacity, memory.word64(kCommandTailAt),
                memory.word64(kCommandHeadAt), options.max_request_bytes),
      replies_(memory.reply_data(), memory.reply_capacity, memory.word64(kReplyTailAt),
               memory.word64(kReplyHeadAt)) {}

RingWire::~RingWire() {
  Stop();
  for (int fd : {daemon_doorbell_, reply_doorbell_, space_doorbell_}) close(fd);
}

void RingWire::Start(std::shared_ptr<StreamEvents> events) {
  events_ = std::move(events);
  thread_ = std::thread([this] { Run(); });
  absl::MutexLock lock(&mu_);
  thread_id_ = thread_.get_id();
}

void RingWire::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    WakeLocked();
  }
  if (thread_.joinable()) thread_.join();
}

void RingWire::Hangup() {
  absl::MutexLock lock(&mu_);
  if (!broken_) {
    broken_ = true;
    broken_status_ = absl::CancelledError("the client closed its ring connection");
  }
  replies_usable_ = false;
  WakeLocked();
}

void RingWire::StartRead(RequestDecoder* into) {
  absl::MutexLock lock(&mu_);
  read_into_ = into;
  WakeLocked();
}

void RingWire::StartWrite(const v1::SessionResponse* response) {
  absl::MutexLock lock(&mu_);
  writing_ = true;
  write_done_ = false;
  if (!broken_) {
    response->SerializeToString(&write_bytes_);
    write_rest_ = write_bytes_;
    ContinueWriteLocked();  // Usually all of it, now: the client sees the reply at once.
  }
  WakeLocked();  // The thread reports OnWriteDone, or waits for room.
}

void RingWire::Finish(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  finishing_ = true;
  finish_status_ = status;
  WakeLocked();
}

void RingWire::WakeLocked() {
  kicked_.store(1, std::memory_order_release);
  if (sleeping_ && std::this_thread::get_id() != thread_id_) RingDoorbell(daemon_doorbell_);
}

void RingWire::ContinueWriteLocked() {
  const uint64_t before = replies_.tail();
  absl::StatusOr<bool> done = replies_.Append(RingChunk::kResponse, write_rest_);
  if (!done.ok()) {
    broken_ = true;
    replies_usable_ = false;
    broken_status_ = done.status();
    return;
  }
  if (replies_.tail() != before) RingClientReply();
  if (*done) write_done_ = true;
}

void RingWire::RingClientReply() {
  if (TakeWaiting(memory_.word32(kClientReplyWaitingAt))) RingDoorbell(reply_doorbell_);
}

void RingWire::RingClientSpace() {
  if (TakeWaiting(memory_.word32(kClientSpaceWaitingAt))) RingDoorbell(space_doorbell_);
}

void RingWire::Run() {
  NameThisThread("cubed-ring");
  std::string message;
  bool half_close_read = false;  // A half-close was read while merging requests.
  std::string end_bytes;
  absl::string_view end_rest;
  bool end_started = false;
  absl::Time finish_deadline = absl::InfiniteFuture();
  for (;;) {
    bool report_write = false;
    bool write_ok = false;
    bool report_broken = false;
    absl::Status broken;
    bool want_room = false;
    RequestDecoder* into = nullptr;
    {
      absl::MutexLock lock(&mu_);
      sleeping_ = false;
      kicked_.store(0, std::memory_order_relaxed);
      if (stop_) break;
      if (writing_ && !write_done_ && !broken_) ContinueWriteLocked();
      if (writing_ && (write_done_ || broken_)) {
        report_write = true;
        write_ok = write_done_ && !broken_;
        writing_ = false;
        write_done_ = false;
      }
      if (broken_ && !broken_reported_) {
        broken_reported_ = true;
        report_broken = true;
        broken = broken_status_;
      }
      if (finishing_ && !writing_ && !report_write) {
        if (!replies_usable_) break;
        if (!end_started) {
          end_started = true;
          v1::RingEnd end;
          end.set_code(static_cast<int32_t>(finish_status_.code()));
          end.set_message(std::string(finish_status_.message()));
          end_bytes = end.SerializeAsString();
          end_rest = end_bytes;
          finish_deadline = absl::Now() + options_.finish_timeout;
        }
        const uint64_t before = replies_.tail();
        absl::StatusOr<bool> done = replies_.Append(RingChunk::kEnd, end_rest);
        if (replies_.tail() != before) RingClientReply();
        if (!done.ok() || *done || absl::Now() >= finish_deadline) break;
        want_room = true;
      }
      if (!broken_ && !requests_done_ && !finishing_) into = read_into_;
      if (writing_) want_room = true;
    }
    if (report_broken) events_->OnBroken(std::move(broken));
    if (report_write) events_->OnWriteDone(write_ok);
    bool progressed = report_broken || report_write;
    if (into != nullptr && half_close_read) {
      // The client's half-close came behind requests merged into the previous read.
      {
        absl::MutexLock lock(&mu_);
        requests_done_ = true;
        read_into_ = nullptr;
      }
      events_->OnReadDone(false, 0);
      continue;
    }
    if (into != nullptr) {
      const uint64_t head = commands_.head();
      RingChunk kind = RingChunk::kRequest;
      absl::StatusOr<bool> got = commands_.Next(&message, &kind);
      absl::Status fault;
      if (got.ok() && *got && kind == RingChunk::kRequest) {
        // Parsed here, then the requests behind it that are whole, merged (their commands
        // append); only the first request of a stream may carry `open`, so none is merged into
        // it and a merged one must not bring one.
        uint64_t read_bytes = message.size();
        if (absl::Status merged = into->Merge(message); !merged.ok()) {
          fault = CommandRingError(merged);
        }
        message.clear();
        const bool first = into->has_open();
        while (fault.ok() && !first && into->commands().size() < kMergeCommands) {
          RingChunk next_kind = RingChunk::kRequest;
          absl::StatusOr<bool> more = commands_.Next(&message, &next_kind);
          if (!more.ok()) {
            fault = more.status();
          } else if (!*more) {
            break;  // Nothing more, or a request still arriving (kept in `message`).
          } else if (next_kind == RingChunk::kRequestsDone) {
            half_close_read = true;
          } else if (next_kind != RingChunk::kRequest) {
            fault = absl::DataLossError(absl::StrCat("command ring: a chunk of kind ",
                                                     static_cast<int>(next_kind),
                                                     " (a reply's) in the command ring"));
          } else {
            read_bytes += message.size();
            if (absl::Status merged = into->Merge(message); !merged.ok()) {
              fault = CommandRingError(merged);
            } else if (into->has_open()) {
              fault =
                  absl::InvalidArgumentError("open: only the first SessionRequest may carry open");
            }
          }
          message.clear();
          if (half_close_read) break;
        }
        if (commands_.head() != head) RingClientSpace();
        progressed = true;
        if (fault.ok()) {
          {
            absl::MutexLock lock(&mu_);
            read_into_ = nullptr;
          }
          events_->OnReadDone(true, read_bytes);  // May call StartRead again, on this thread.
        }
        got = false;  // Handled.
      } else if (commands_.head() != head) {
        RingClientSpace();
      }
      if (!got.ok()) {
        fault = got.status();
      } else if (*got) {
        progressed = true;
        message.clear();
        if (kind == RingChunk::kRequestsDone) {
          {
            absl::MutexLock lock(&mu_);
            requests_done_ = true;
            read_into_ = nullptr;
          }
          events_->OnReadDone(false, 0);  // The client half-closed.
        } else {
          fault = absl::DataLossError(absl::StrCat("command ring: a chunk of kind ",
                                                   static_cast<int>(kind),
                                                   " (a reply's) in the command ring"));
        }
      }
      if (!fault.ok()) {
        absl::MutexLock lock(&mu_);
        if (!broken_) {
          broken_ = true;
          broken_status_ = std::move(fault);
        }
        progressed = true;
      }
    }
    if (!progressed) Sleep(finish_deadline, into != nullptr, want_room);
  }
  // The client may sleep on its reply doorbell for the end record.
  RingDoorbell(reply_doorbell_);
  events_.reset();
  finished_.store(true, std::memory_order_release);
}

void RingWire::Sleep(absl::Time deadline, bool want_read, bool want_room) {
  const auto ready = [&] {
    if (kicked_.load(std::memory_order_acquire) != 0) return true;
    return want_read && commands_.HasPublished();
  };
  SpinUntil(options_.spin, ready);  // Note [Spin checks].
  {
    absl::MutexLock lock(&mu_);
    sleeping_ = true;
    StoreWaiting(memory_.word32(kDaemonWaitingAt), 1);
    const bool room = want_room && memory_.reply_capacity - replies_.Pending() >= kMinChunkRoom;
    if (ready() || room) {
      StoreWaiting(memory_.word32(kDaemonWaitingAt), 0);
      return;
    }
  }
  // At most a second per sleep, so that a lost wake-up (a client that broke the protocol) costs
  // only time; the finish deadline, when there is one.
  const absl::Duration left = std::min(deadline - absl::Now(), absl::Seconds(1));
  const int ms = static_cast<int>(std::max<int64_t>(absl::ToInt64Milliseconds(left), 1));
  pollfd fd{daemon_doorbell_, POLLIN, 0};
  const int n = poll(&fd, 1, ms);
  StoreWaiting(memory_.word32(kDaemonWaitingAt), 0);
  if (n > 0 && (fd.revents & POLLIN) != 0) DrainDoorbell(daemon_doorbell_);
}

}  // namespace cubed
