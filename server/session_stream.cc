#include "server/session_stream.h"

#include <deque>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/session_stream_commands.h"
#include "server/session_stream_runner.h"
#include "server/status_conversion.h"
#include "spdlog/spdlog.h"

namespace cubed {

using Reactor = grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionResponse>;

// One received SessionRequest, converted, waiting for the loop.
struct StreamBatch {
  bool open = false;
  uint64_t lease_ms = 0;
  std::vector<StreamCommand> commands;
  size_t next = 0;     // Commands before this one already ran (a parked batch).
  uint64_t bytes = 0;  // Wire size, for Note [Stream backpressure].
};

// Everything one stream shares between its reactor (gRPC threads), its loop tasks and backend
// completions; owned jointly by all of them, so a task may outlive the reactor. Every call on
// the reactor happens under mu_ and before Finish; OnDone (after Finish) only drops the
// reactor's reference. `runner_` is touched only on the loop thread.
class StreamState final : public ReplySink, public std::enable_shared_from_this<StreamState> {
 public:
  StreamState(SessionStreamService* service, Reactor* reactor)
      : service_(service), reactor_(reactor) {}

  // Starts the first read, or ends the stream UNAVAILABLE when the daemon is draining.
  void Start(bool draining);
  // Reactions, forwarded by the reactor.
  void OnReadDone(bool ok);
  void OnWriteDone(bool ok);
  void OnCancel() { End(absl::CancelledError("the client cancelled the stream")); }
  // Ends the stream with `status` (not OK), dropping commands not yet run and closing the session.
  void End(absl::Status status);

  uint64_t Reserve() override;
  void Fill(uint64_t slot, v1::Reply reply) override;

 private:
  // Converts incoming_ into a batch, or returns the protocol error that ends the stream.
  absl::StatusOr<StreamBatch> TakeIncoming();
  // One step on the loop: runs one batch, or closes the session when the stream is over.
  void Drain(Device& device);
  // Runs `batch` from batch.next; returns false when it parked (batch.next says where).
  bool RunBatch(Device& device, StreamBatch& batch);

  void EndLocked(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ScheduleDrainLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeReadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool InFlightOverLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool RepliesOverLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  SessionStreamService* const service_;
  const SessionStreamLimits& limits() const { return service_->stream_limits_; }

  absl::Mutex mu_;
  Reactor* reactor_ ABSL_GUARDED_BY(mu_);  // Null once finished.
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool ending_ ABSL_GUARDED_BY(mu_) = false;  // Cancelled or failed: stop, close, finish.
  absl::Status end_status_ ABSL_GUARDED_BY(mu_);
  bool got_first_ = false;  // Touched only in OnReadDone (one read at a time).
  v1::SessionRequest incoming_;  // The read target; touched only while no read is in flight.
  bool read_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool read_closed_ ABSL_GUARDED_BY(mu_) = false;

  DeviceLoop* loop_ ABSL_GUARDED_BY(mu_) = nullptr;  // Set by the first request.
  bool loop_gone_ ABSL_GUARDED_BY(mu_) = false;      // Post failed: the daemon stops.
  std::deque<StreamBatch> batches_ ABSL_GUARDED_BY(mu_);
  bool drain_scheduled_ ABSL_GUARDED_BY(mu_) = false;
  bool parked_ ABSL_GUARDED_BY(mu_) = false;
  bool session_closed_ ABSL_GUARDED_BY(mu_) = true;  // No session to close (yet, or any more).
  uint64_t pending_commands_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;

  std::optional<v1::SessionResponse::Opened> opened_ ABSL_GUARDED_BY(mu_);
  std::deque<std::optional<v1::Reply>> slots_ ABSL_GUARDED_BY(mu_);
  uint64_t first_slot_ ABSL_GUARDED_BY(mu_) = 0;   // Slot number of slots_.front().
  uint64_t reply_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // Filled and not yet written, bytes.
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  v1::SessionResponse writing_ ABSL_GUARDED_BY(mu_);
  uint64_t writing_bytes_ ABSL_GUARDED_BY(mu_) = 0;

  StreamRunner runner_;  // Loop thread only.
};

namespace {

// The reactor: a thin shell; StreamState does the work.
class StreamReactor final : public Reactor {
 public:
  // Start the stream with state()->Start once it is registered.
  explicit StreamReactor(SessionStreamService* service)
      : state_(std::make_shared<StreamState>(service, this)) {}
  std::shared_ptr<StreamState> state() const { return state_; }

  void OnReadDone(bool ok) override { state_->OnReadDone(ok); }
  void OnWriteDone(bool ok) override { state_->OnWriteDone(ok); }
  void OnCancel() override { state_->OnCancel(); }
  void OnDone() override { delete this; }

 private:
  std::shared_ptr<StreamState> state_;
};

}  // namespace

void StreamState::Start(bool draining) {
  absl::MutexLock lock(&mu_);
  if (draining) {
    EndLocked(absl::UnavailableError("the daemon is shutting down"));
    return;
  }
  MaybeReadLocked();
}

absl::StatusOr<StreamBatch> StreamState::TakeIncoming() {
  const bool first = !got_first_;
  got_first_ = true;
  if (first && !incoming_.has_open()) {
    return absl::InvalidArgumentError(
        "open: the first SessionRequest must carry open {device, lease_ms}");
  }
  if (!first && incoming_.has_open()) {
    return absl::InvalidArgumentError("open: only the first SessionRequest may carry open");
  }
  if (static_cast<uint64_t>(incoming_.commands_size()) > limits().max_commands) {
    return absl::InvalidArgumentError(absl::StrCat("commands: ", incoming_.commands_size(),
                                                   " in one SessionRequest; at most ",
                                                   limits().max_commands));
  }
  StreamBatch batch;
  batch.open = first;
  batch.lease_ms = incoming_.open().lease_ms();
  batch.bytes = incoming_.ByteSizeLong();
  batch.commands.reserve(incoming_.commands_size());
  for (v1::Command& c : *incoming_.mutable_commands()) {
    batch.commands.push_back(ToStreamCommand(c, service_->limits_));
  }
  return batch;
}

void StreamState::OnReadDone(bool ok) {
  if (!ok) {  // Half-close, cancel or a broken stream.
    absl::MutexLock lock(&mu_);
    read_in_flight_ = false;
    read_closed_ = true;
    ScheduleDrainLocked();
    MaybeFinishLocked();
    return;
  }
  DeviceLoop* loop = nullptr;
  if (!got_first_ && incoming_.has_open()) {
    const uint32_t device = incoming_.open().device();
    if (device >= service_->loops_.size()) {
      End(absl::NotFoundError(absl::StrCat("open.device: device ", device,
                                           " does not exist (this daemon has ",
                                           service_->loops_.size(), ")")));
      return;
    }
    loop = service_->loops_[device];
  }
  absl::StatusOr<StreamBatch> batch = TakeIncoming();
  incoming_.Clear();
  absl::MutexLock lock(&mu_);
  read_in_flight_ = false;
  if (!batch.ok()) {
    EndLocked(batch.status());
    return;
  }
  if (ending_) return;
  if (loop != nullptr) {
    loop_ = loop;
    session_closed_ = false;  // The open batch opens one; Drain closes it.
  }
  pending_commands_ += batch->commands.size();
  pending_bytes_ += batch->bytes;
  batches_.push_back(*std::move(batch));
  ScheduleDrainLocked();
  MaybeReadLocked();
}

void StreamState::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  write_in_flight_ = false;
  reply_bytes_ -= writing_bytes_;
  writing_bytes_ = 0;
  writing_.Clear();
  if (!ok) {
    EndLocked(absl::CancelledError("the stream broke while writing a reply"));
    return;
  }
  if (parked_ && !RepliesOverLocked()) {
    parked_ = false;
    ScheduleDrainLocked();
  }
  MaybeWriteLocked();
  MaybeReadLocked();
  MaybeFinishLocked();
}

void StreamState::End(absl::Status status) {
  absl::MutexLock lock(&mu_);
  EndLocked(std::move(status));
}

void StreamState::EndLocked(absl::Status status) {
  if (ending_ || finished_) return;
  ending_ = true;
  end_status_ = std::move(status);
  spdlog::debug("session stream ends: {}", end_status_.ToString());
  batches_.clear();
  parked_ = false;
  ScheduleDrainLocked();  // Closes the session on the loop.
  MaybeFinishLocked();
}

uint64_t StreamState::Reserve() {
  absl::MutexLock lock(&mu_);
  slots_.emplace_back();
  return first_slot_ + slots_.size() - 1;
}

void StreamState::Fill(uint64_t slot, v1::Reply reply) {
  absl::MutexLock lock(&mu_);
  reply_bytes_ += reply.ByteSizeLong();
  slots_[slot - first_slot_] = std::move(reply);
  MaybeWriteLocked();
}

bool StreamState::InFlightOverLocked() const {
  return pending_commands_ + slots_.size() >= limits().max_commands ||
         pending_bytes_ + reply_bytes_ >= limits().max_bytes;
}

bool StreamState::RepliesOverLocked() const {
  return slots_.size() >= limits().max_commands || reply_bytes_ >= limits().max_bytes;
}

void StreamState::ScheduleDrainLocked() {
  if (drain_scheduled_ || loop_ == nullptr || loop_gone_) return;
  const bool work = !ending_ && !parked_ && !batches_.empty();
  const bool close = (ending_ || (read_closed_ && batches_.empty())) && !session_closed_;
  if (!work && !close) return;
  drain_scheduled_ = true;
  if (!loop_->Post([self = shared_from_this()](Device& d) { self->Drain(d); })) {
    drain_scheduled_ = false;
    loop_gone_ = true;
    session_closed_ = true;  // The loop's shutdown closes every session.
    EndLocked(absl::UnavailableError("the daemon is shutting down"));
    MaybeFinishLocked();
  }
}

void StreamState::Drain(Device& device) {
  StreamBatch batch;
  {
    absl::MutexLock lock(&mu_);
    const bool work = !ending_ && !parked_ && !batches_.empty();
    if (!work) {
      drain_scheduled_ = false;
      if (ending_ || (read_closed_ && batches_.empty() && !parked_)) {
        runner_.Close(device);
        session_closed_ = true;
        MaybeFinishLocked();
      }
      return;
    }
    batch = std::move(batches_.front());
    batches_.pop_front();
  }
  const bool done = RunBatch(device, batch);
  absl::MutexLock lock(&mu_);
  drain_scheduled_ = false;
  if (done) {
    pending_bytes_ -= batch.bytes;
  } else if (!ending_) {
    batches_.push_front(std::move(batch));
  }
  // One batch per task: other streams and unary calls on this loop get their turn.
  ScheduleDrainLocked();
  MaybeReadLocked();
}

bool StreamState::RunBatch(Device& device, StreamBatch& batch) {
  if (batch.open) {
    batch.open = false;
    absl::StatusOr<v1::SessionResponse::Opened> opened = runner_.Open(device, batch.lease_ms);
    absl::MutexLock lock(&mu_);
    if (!opened.ok()) {
      session_closed_ = true;
      EndLocked(opened.status());
      return true;
    }
    opened_ = *std::move(opened);
    MaybeWriteLocked();
  } else if (!device.HasSession(runner_.session())) {
    End(absl::NotFoundError(absl::StrCat(
        "session ", runner_.session(),
        " was closed under the stream (its lease passed, or CloseSession named it)")));
    return true;
  }
  const std::shared_ptr<ReplySink> sink = shared_from_this();
  while (batch.next < batch.commands.size()) {
    {
      absl::MutexLock lock(&mu_);
      if (ending_) return true;
      if (RepliesOverLocked()) {
        parked_ = true;
        return false;
      }
      --pending_commands_;
    }
    runner_.Run(device, batch.commands[batch.next], sink);
    batch.commands[batch.next] = StreamCommand();  // Frees its payload now.
    ++batch.next;
  }
  return true;
}

void StreamState::MaybeReadLocked() {
  if (finished_ || ending_ || read_in_flight_ || read_closed_ || InFlightOverLocked()) return;
  read_in_flight_ = true;
  reactor_->StartRead(&incoming_);
}

void StreamState::MaybeWriteLocked() {
  if (finished_ || ending_ || write_in_flight_) return;
  if (opened_.has_value()) {
    *writing_.mutable_opened() = *std::move(opened_);
    opened_.reset();
  }
  while (!slots_.empty() && slots_.front().has_value()) {
    const uint64_t bytes = slots_.front()->ByteSizeLong();
    if (writing_.replies_size() > 0 && writing_bytes_ + bytes > limits().max_response_bytes) break;
    writing_bytes_ += bytes;
    *writing_.add_replies() = std::move(*slots_.front());
    slots_.pop_front();
    ++first_slot_;
  }
  if (!writing_.has_opened() && writing_.replies_size() == 0) return;
  write_in_flight_ = true;
  reactor_->StartWrite(&writing_);
}

void StreamState::MaybeFinishLocked() {
  if (finished_ || write_in_flight_) return;
  if (ending_) {
    FinishLocked(end_status_);
    return;
  }
  const bool over = read_closed_ && batches_.empty() && !drain_scheduled_ && session_closed_;
  if (over && slots_.empty() && !opened_.has_value()) FinishLocked(absl::OkStatus());
}

void StreamState::FinishLocked(const absl::Status& status) {
  finished_ = true;
  reactor_->Finish(ToGrpcStatus(status));
  reactor_ = nullptr;
  service_->Forget(this);
}

SessionStreamService::SessionStreamService(std::vector<DeviceLoop*> loops, RequestLimits limits,
                                           SessionStreamLimits stream_limits)
    : loops_(std::move(loops)), limits_(limits), stream_limits_(stream_limits) {}

SessionStreamService::~SessionStreamService() = default;

Reactor* SessionStreamService::Session(grpc::CallbackServerContext*) {
  auto* reactor = new StreamReactor(this);
  std::shared_ptr<StreamState> state = reactor->state();
  {
    absl::MutexLock lock(&mu_);
    open_.emplace(state.get(), state);
  }
  // Registered first: a stream that ends at once (draining) forgets itself.
  state->Start(draining_.load(std::memory_order_acquire));
  return reactor;
}

void SessionStreamService::Forget(StreamState* state) {
  absl::MutexLock lock(&mu_);
  open_.erase(state);
}

size_t SessionStreamService::open_streams() const {
  absl::MutexLock lock(&mu_);
  return open_.size();
}

void SessionStreamService::StartDraining() {
  draining_.store(true, std::memory_order_release);
  std::vector<std::shared_ptr<StreamState>> open;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [ptr, state] : open_) open.push_back(state);
  }
  for (auto& state : open) state->End(absl::UnavailableError("the daemon is shutting down"));
}

}  // namespace cubed
