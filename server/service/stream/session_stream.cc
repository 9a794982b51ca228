#include "server/service/stream/session_stream.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/channel/stream_runner.h"
#include "server/service/stream/bulk_transfers.h"
#include "server/service/stream/grpc_stream_wire.h"
#include "server/service/stream/request_decoder.h"
#include "server/service/stream/stream_batch.h"
#include "server/service/wire_conversion.h"
#include "spdlog/spdlog.h"

namespace cubed {

// Commands a stream runs in one turn on its loop (Note [Stream turns]): the ring's merged read.
constexpr uint64_t kTurnCommands = 256;
// Executes claimed at one look at the stream's state under its lock (Note [Claimed executes]).
constexpr uint64_t kExecutesPerClaim = 32;

// How a stream ends when its session went away under it: session.proto promises NOT_FOUND.
absl::Status SessionClosedUnder(SessionId session) {
  return absl::NotFoundError(
      absl::StrCat("session ", session.value(),
                   " was closed under the stream (its lease passed, or CloseSession named it)"));
}

// The Compute RPC a stream command needs permission for: the one of the same name
// ("create_tensor" needs "CreateTensor"). Those without an RPC: release_region and release_graph
// need "Release", the other graph commands "Execute".
std::string RpcOfKind(StreamCommand::Kind kind) {
  using Kind = StreamCommand::Kind;
  if (kind == Kind::kReleaseRegion || kind == Kind::kReleaseGraph) return "Release";
  if (kind == Kind::kBeginGraph || kind == Kind::kEndGraph || kind == Kind::kReplayGraph) {
    return "Execute";
  }
  std::string rpc;
  bool upper = true;
  for (char c : KindName(kind)) {
    if (c == '_') {
      upper = true;
      continue;
    }
    rpc.push_back(upper ? absl::ascii_toupper(static_cast<unsigned char>(c)) : c);
    upper = false;
  }
  return rpc;
}

// Everything one stream shares between its wire (a gRPC reactor on gRPC threads, or a command
// ring's thread), its loop tasks and backend completions; owned jointly by all of them, so a task
// may outlive the wire. Every call on the wire happens under mu_ and before Finish; a reactor's
// OnDone (after Finish) only drops its reference. `runner_` is touched only on the loop thread.
class StreamState final : public ReplySink,
                          public StreamEvents,
                          public std::enable_shared_from_this<StreamState> {
 public:
  StreamState(SessionStreamService* service, StreamWire* wire)
      : service_(service),
        wire_(wire),
        incoming_(service->limits_, service->stream_limits_.max_commands,
                  service->stream_limits_.fast_execute_decode) {}

  // The stream's principal (null without an authenticator); set before Start, then fixed.
  void SetPrincipal(PrincipalPtr principal) { principal_ = std::move(principal); }

  // Starts the first read, or ends the stream UNAVAILABLE when the daemon is draining.
  void Start(bool draining);
  // StreamEvents: what the wire reports.
  void OnReadDone(bool ok, uint64_t wire_bytes) override;
  void OnWriteDone(bool ok) override;
  void OnBroken(absl::Status status) override { End(std::move(status)); }
  // Ends the stream with `status` (not OK), dropping commands not yet run and closing the session.
  void End(absl::Status status);

  uint64_t Reserve() override;
  void Fill(uint64_t slot, StreamReply reply) override;

 private:
  // Takes incoming_'s commands as a batch (giving it recycled_'s room for the next read), or
  // returns the protocol error that ends the stream. `wire_bytes`: the request's serialized size.
  absl::StatusOr<StreamBatch> TakeIncoming(uint64_t wire_bytes);
  // Destroys the commands of `spent` and keeps the largest vector's room in recycled_.
  void Recycle(std::vector<std::vector<StreamCommand>> spent);
  // Fails the commands of `batch` the principal may not run or that exceed its in-flight quotas
  // (they fail in their place, like any invalid command), and takes the batch's quota slots.
  void ApplyPrincipal(StreamBatch& batch);
  // One turn on the loop (Note [Stream turns]): runs up to kTurnCommands commands of its batches,
  // or one step of a transfer, or closes the session when the stream is over.
  void Drain(Device& device);
  // Ends Drain's turn: schedules the next one if the stream has work, reads if it has room.
  void EndTurnLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Loop thread: a Drain threw (Note [Loop task exceptions], device_loop.h): ends the stream
  // with `error`, which closes its session.
  void OnDrainException(absl::Status error);
  // Runs `batch` from batch.next, at most `budget` commands (each taken from it); returns false
  // when it parked, waits for a transfer or spent the budget (batch.next says where).
  bool RunBatch(Device& device, StreamBatch& batch, uint64_t& budget);
  // Runs one command through runner_, recording it in the metrics. `clock` is when it starts
  // (read once for the batch) and becomes when it ended: one clock read per command.
  void RunMetered(Device& device, StreamCommand& command, absl::Time arrival,
                  const std::shared_ptr<ReplySink>& sink, absl::Time& clock);

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
  PrincipalPtr principal_;
  // Commands in flight before the wire stops reading: the stream's bound, or the principal's
  // max_session_inflight_commands when lower.
  uint64_t max_commands() const {
    const uint64_t quota =
        principal_ != nullptr ? principal_->quotas.max_session_inflight_commands : 0;
    return quota != 0 ? std::min<uint64_t>(quota, limits().max_commands) : limits().max_commands;
  }

  absl::Mutex mu_;
  StreamWire* wire_ ABSL_GUARDED_BY(mu_);  // Null once finished.
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool ending_ ABSL_GUARDED_BY(mu_) = false;  // Cancelled or failed: stop, close, finish.
  absl::Status end_status_ ABSL_GUARDED_BY(mu_);
  bool got_first_ = false;  // Touched only in OnReadDone (one read at a time).
  // The read target, which decodes what the wire reads; touched only while no read is in flight.
  RequestDecoder incoming_;
  bool read_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool read_closed_ ABSL_GUARDED_BY(mu_) = false;

  DeviceLoop* loop_ ABSL_GUARDED_BY(mu_) = nullptr;  // Set by the first request.
  bool loop_gone_ ABSL_GUARDED_BY(mu_) = false;      // Post failed: the daemon stops.
  std::deque<StreamBatch> batches_ ABSL_GUARDED_BY(mu_);
  // Commands the loop ran, freed on the wire's thread at its next read (Note [Spent commands]).
  std::vector<std::vector<StreamCommand>> spent_ ABSL_GUARDED_BY(mu_);
  // An empty vector with room for the next batch's commands: a merged read of 256 commands
  // (170 KB) was a fresh allocation, faulted in and freed every read. Touched only in
  // OnReadDone, before the next read can start.
  std::vector<StreamCommand> recycled_;
  bool drain_scheduled_ ABSL_GUARDED_BY(mu_) = false;
  bool parked_ ABSL_GUARDED_BY(mu_) = false;
  bool session_closed_ ABSL_GUARDED_BY(mu_) = true;  // No session to close (yet, or any more).
  // Commands received and not yet run (the in-flight quota's count): raised under mu_ as a batch
  // arrives, lowered by the loop as each command starts, without mu_ (Note [Claimed executes]).
  std::atomic<uint64_t> pending_commands_{0};
  uint64_t pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;

  std::optional<StreamOpened> opened_ ABSL_GUARDED_BY(mu_);
  std::deque<std::optional<v1::Reply>> slots_ ABSL_GUARDED_BY(mu_);
  uint64_t first_slot_ ABSL_GUARDED_BY(mu_) = 0;   // Slot number of slots_.front().
  uint64_t reply_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // Filled and not yet written, bytes.
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  v1::SessionResponse writing_ ABSL_GUARDED_BY(mu_);
  uint64_t writing_bytes_ ABSL_GUARDED_BY(mu_) = 0;

  StreamRunner runner_;  // Loop thread only.
  // Bulk transfers (Note [Bulk transfers], bulk_transfers.h); set by Start, then fixed.
  std::shared_ptr<BulkTransfers> bulk_;
  // Whether the loop has something to run: a batch, or a step of the transfer the stream waits
  // for.
  bool WorkLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (ending_) return false;
    if (bulk_ != nullptr && bulk_->waiting()) return bulk_->ready();
    return !parked_ && !batches_.empty();
  }
  bool WaitingLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return bulk_ != nullptr && bulk_->waiting();
  }

  // Metrics of the commands: the one running on the loop (loop thread only), and the answering
  // commands whose reply is not filled yet, by slot.
  struct RunningCommand {
    StreamCommandMetrics* metrics = nullptr;
    absl::Time start;
    bool reserved = false;  // It reserved a reply slot: Fill records it.
  };
  RunningCommand running_;
  absl::flat_hash_map<uint64_t, RunningCommand> answering_ ABSL_GUARDED_BY(mu_);
  MethodMetrics& stream_metrics() { return service_->metrics_->method(Method::kSession); }
};

void StreamState::Start(bool draining) {
  bulk_ = std::make_shared<BulkTransfers>([weak = weak_from_this()] {
    if (std::shared_ptr<StreamState> self = weak.lock()) {
      absl::MutexLock lock(&self->mu_);
      self->ScheduleDrainLocked();
    }
  });
  absl::MutexLock lock(&mu_);
  if (draining) {
    EndLocked(absl::UnavailableError("the daemon is shutting down"));
    return;
  }
  MaybeReadLocked();
}

// StreamCommandRpc, made once per kind (it is looked up for every command).
const std::string& StreamCommandRpc(StreamCommand::Kind kind) {
  static const auto* names = [] {
    auto* n = new std::vector<std::string>();
    for (int k = 0; k <= static_cast<int>(StreamCommand::kLastKind); ++k) {
      n->push_back(RpcOfKind(static_cast<StreamCommand::Kind>(k)));
    }
    return n;
  }();
  return (*names)[static_cast<size_t>(kind)];
}

absl::StatusOr<StreamBatch> StreamState::TakeIncoming(uint64_t wire_bytes) {
  RequestDecoder& in = incoming_;
  const bool first = !got_first_;
  got_first_ = true;
  if (first && !in.has_open()) {
    return absl::InvalidArgumentError(
        "open: the first SessionRequest must carry open {device, lease_ms}");
  }
  if (!first && in.has_open()) {
    return absl::InvalidArgumentError("open: only the first SessionRequest may carry open");
  }
  if (in.too_many() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "commands: ", in.too_many(), " in one SessionRequest; at most ", limits().max_commands));
  }
  StreamBatch batch;
  batch.commands.swap(in.commands());  // Decoded by the wire's read (RequestDecoder::Merge).
  if (recycled_.capacity() > in.commands().capacity()) in.commands().swap(recycled_);
  batch.open = first;
  batch.lease_ms = in.open().lease_ms();
  batch.resume = SessionId(in.open().resume_session());
  batch.bytes = wire_bytes;
  batch.arrival = absl::Now();
  stream_metrics().bytes_received.fetch_add(batch.bytes, std::memory_order_relaxed);
  ApplyPrincipal(batch);
  return batch;
}

void StreamState::ApplyPrincipal(StreamBatch& batch) {
  if (principal_ == nullptr) return;
  for (StreamCommand& c : batch.commands) {
    if (!c.invalid.ok()) continue;
    c.invalid = principal_->CheckRpc(StreamCommandRpc(c.kind));
    if (c.invalid.ok() && c.kind == StreamCommand::Kind::kExecute) {
      c.invalid = principal_->CheckExecute(!c.execute.kernel.is_builtin, c.execute.unchecked);
    }
  }
  const uint64_t n = batch.commands.size();
  uint64_t room = n;
  if (const uint64_t quota = principal_->quotas.max_session_inflight_commands; quota != 0) {
    absl::MutexLock lock(&mu_);
    const uint64_t pending = pending_commands_.load(std::memory_order_relaxed);
    room = pending >= quota ? 0 : std::min(n, quota - pending);
  }
  const uint64_t taken = principal_->AcquireInflightUpTo(room);
  batch.inflight = InflightSlots(principal_, taken);
  for (uint64_t i = taken; i < n; ++i) {
    StreamCommand& c = batch.commands[i];
    if (!c.invalid.ok()) continue;
    c.invalid = i >= room
                    ? absl::ResourceExhaustedError(absl::StrCat(
                          "quota max_session_inflight_commands of principal '", principal_->name,
                          "' (", principal_->quotas.max_session_inflight_commands,
                          ") exceeded by this SessionRequest"))
                    : absl::ResourceExhaustedError(absl::StrCat(
                          "quota max_inflight_commands of principal '", principal_->name, "' (",
                          principal_->quotas.max_inflight_commands, ") reached"));
  }
}

void StreamState::OnReadDone(bool ok, uint64_t wire_bytes) {
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
    // A resumed session routes by its id (Note [Checkpoint and restore], device.h).
    const uint64_t resume = incoming_.open().resume_session();
    const uint32_t device =
        resume != 0 ? DeviceOfSession(SessionId(resume)) : incoming_.open().device();
    if (device >= service_->loops_.size() && resume != 0) {
      End(SessionNotFound(SessionId(resume)));
      return;
    }
    if (device >= service_->loops_.size()) {
      End(absl::NotFoundError(absl::StrCat("open.device: device ", device,
                                           " does not exist (this daemon has ",
                                           service_->loops_.size(), ")")));
      return;
    }
    loop = service_->loops_[device];
  }
  {
    // Note [Spent commands]: destroyed here, off the loop and outside the lock; their room
    // holds the next batch.
    std::vector<std::vector<StreamCommand>> spent;
    {
      absl::MutexLock lock(&mu_);
      spent.swap(spent_);
    }
    Recycle(std::move(spent));
  }
  absl::StatusOr<StreamBatch> batch = TakeIncoming(wire_bytes);
  incoming_.Reset();  // Its commands moved into the batch (Note [Request arena]).
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
  pending_commands_.fetch_add(batch->commands.size(), std::memory_order_relaxed);
  pending_bytes_ += batch->bytes;
  // Note [Coalesced batches]. The loop runs only batches it took out of batches_ under mu_: the
  // last one here is waiting, so its end is free to grow.
  const bool quotas =
      principal_ != nullptr && (principal_->quotas.max_inflight_commands != 0 ||
                                principal_->quotas.max_session_inflight_commands != 0);
  if (batches_.empty() || !CoalesceInto(batches_.back(), *batch, quotas, recycled_)) {
    batches_.push_back(*std::move(batch));
  }
  ScheduleDrainLocked();
  MaybeReadLocked();
}

void StreamState::Recycle(std::vector<std::vector<StreamCommand>> spent) {
  for (std::vector<StreamCommand>& commands : spent) {
    commands.clear();
    if (commands.capacity() > recycled_.capacity()) recycled_.swap(commands);
  }
}

void StreamState::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  write_in_flight_ = false;
  reply_bytes_ -= writing_bytes_;
  writing_bytes_ = 0;
  writing_.Clear();
  if (!ok) {
    EndLocked(absl::CancelledError("the stream broke while writing a reply"));
    // When the stream was ending already (a cancel came first) and its session is closed, this
    // write was all Finish waited for.
    MaybeFinishLocked();
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
  if (bulk_ != nullptr) bulk_->EndAll(end_status_);
  batches_.clear();
  parked_ = false;
  ScheduleDrainLocked();  // Closes the session on the loop.
  MaybeFinishLocked();
}

uint64_t StreamState::Reserve() {
  absl::MutexLock lock(&mu_);
  slots_.emplace_back();
  const uint64_t slot = first_slot_ + slots_.size() - 1;
  if (running_.metrics != nullptr && !running_.reserved) {
    running_.reserved = true;
    answering_.emplace(slot, running_);
  }
  return slot;
}

void StreamState::Fill(uint64_t slot, StreamReply plain) {
  v1::Reply reply;  // Converted before the lock: the bytes move, nothing is copied.
  ToWire(std::move(plain), &reply);
  absl::MutexLock lock(&mu_);
  if (auto it = answering_.find(slot); it != answering_.end()) {
    it->second.metrics->execution.Observe(absl::Now() - it->second.start);
    it->second.metrics->codes.Count(static_cast<absl::StatusCode>(reply.code()));
    answering_.erase(it);
  }
  reply_bytes_ += reply.ByteSizeLong();
  slots_[slot - first_slot_] = std::move(reply);
  MaybeWriteLocked();
}

bool StreamState::InFlightOverLocked() const {
  return pending_commands_.load(std::memory_order_relaxed) + slots_.size() >= max_commands() ||
         pending_bytes_ + reply_bytes_ >= limits().max_bytes;
}

bool StreamState::RepliesOverLocked() const {
  return slots_.size() >= limits().max_commands || reply_bytes_ >= limits().max_bytes;
}

void StreamState::ScheduleDrainLocked() {
  if (drain_scheduled_ || loop_ == nullptr || loop_gone_) return;
  const bool work = WorkLocked();
  const bool close =
      (ending_ || (read_closed_ && batches_.empty() && !WaitingLocked())) && !session_closed_;
  if (!work && !close) return;
  drain_scheduled_ = true;
  if (!loop_->Post([self = shared_from_this()](Device& d) { self->Drain(d); },
                   [self = shared_from_this()](absl::Status error) {
                     self->OnDrainException(std::move(error));
                   })) {
    drain_scheduled_ = false;
    loop_gone_ = true;
    session_closed_ = true;  // The loop's shutdown closes every session.
    EndLocked(absl::UnavailableError("the daemon is shutting down"));
    MaybeFinishLocked();
  }
}

void StreamState::Drain(Device& device) {
  uint64_t budget = kTurnCommands;  // Note [Stream turns].
  bool first = true;
  for (;;) {
    StreamBatch batch;
    bool step = false;  // The stream waits for a transfer: one step of it, not a batch.
    {
      absl::MutexLock lock(&mu_);
      const bool work = WorkLocked();
      if (!work && !first) {  // The turn ran every batch there was.
        EndTurnLocked();
        return;
      }
      if (!work) {
        drain_scheduled_ = false;
        if (ending_ || (read_closed_ && batches_.empty() && !parked_ && !WaitingLocked())) {
          service_->UnregisterBulk(runner_.session());
          bulk_->EndAll(end_status_);
          runner_.Close(device);
          session_closed_ = true;
          MaybeFinishLocked();
        }
        return;
      }
      step = WaitingLocked();
      if (!step) {
        batch = std::move(batches_.front());
        batches_.pop_front();
      }
    }
    first = false;
    if (step) {
      // One step of the transfer the stream waits for (Note [Bulk transfers]), without mu_: a
      // step that throws leaves it free (Note [Loop task exceptions], device_loop.h).
      if (!device.HasSession(runner_.session())) {
        End(SessionClosedUnder(runner_.session()));
      } else {
        bulk_->Step(device, runner_, *this);
      }
      absl::MutexLock lock(&mu_);
      EndTurnLocked();
      MaybeFinishLocked();
      return;
    }
    const bool done = RunBatch(device, batch, budget);
    absl::MutexLock lock(&mu_);
    if (done) {
      pending_bytes_ -= batch.bytes;
      // Note [Spent commands]: their vectors were allocated on the wire's thread; freeing them
      // there (the next read) keeps a dozen frees per command off the loop.
      spent_.push_back(std::move(batch.commands));
    } else if (!ending_) {
      batches_.push_front(std::move(batch));  // Parked, waiting, or its turn is over.
    }
    if (!done || budget == 0 || ending_) {
      EndTurnLocked();  // Other streams and unary calls on this loop get theirs.
      return;
    }
    MaybeReadLocked();  // Room freed: the wire may read while the turn goes on.
  }
}

void StreamState::EndTurnLocked() {
  drain_scheduled_ = false;
  ScheduleDrainLocked();
  MaybeReadLocked();
}

void StreamState::OnDrainException(absl::Status error) {
  absl::MutexLock lock(&mu_);
  drain_scheduled_ = false;  // The drain that threw is over; EndLocked schedules the close.
  EndLocked(std::move(error));
}

void StreamState::RunMetered(Device& device, StreamCommand& command, absl::Time arrival,
                             const std::shared_ptr<ReplySink>& sink, absl::Time& clock) {
  StreamCommandMetrics& metrics =
      service_->metrics_->stream_command(static_cast<int>(command.kind));
  const absl::Time start = clock;
  metrics.queue.Observe(start - arrival);
  const uint64_t failures = runner_.failures();
  running_ = RunningCommand{&metrics, start, false};
  device.NoteArrival(arrival);  // For its trace event (TraceEvent::queued_ns).
  runner_.Run(device, command, sink, start);
  device.NoteArrival(absl::InfinitePast());  // Unused when the command touched no session.
  clock = absl::Now();
  if (!running_.reserved) {  // Done now; otherwise Fill records it.
    metrics.execution.Observe(clock - start);
    metrics.codes.Count(runner_.failures() != failures ? runner_.last_failure_code()
                                                       : absl::StatusCode::kOk);
  }
  running_ = RunningCommand();
}

bool StreamState::RunBatch(Device& device, StreamBatch& batch, uint64_t& budget) {
  if (batch.open) {
    batch.open = false;
    // A session closed under the stream (lease, CloseSession) ends it at once with NOT_FOUND.
    Session::ClosedCallback on_closed = [weak = weak_from_this()](const absl::Status& why) {
      if (std::shared_ptr<StreamState> self = weak.lock()) self->End(why);
    };
    absl::StatusOr<StreamOpened> opened =
        batch.resume != SessionId()
            ? runner_.Resume(device, batch.resume, principal_, std::move(on_closed))
            : runner_.Open(device, batch.lease_ms, principal_, std::move(on_closed));
    absl::MutexLock lock(&mu_);
    if (!opened.ok()) {
      session_closed_ = true;
      EndLocked(opened.status());
      return true;
    }
    service_->RegisterBulk(opened->session, bulk_, principal_);
    opened_ = *std::move(opened);
    MaybeWriteLocked();
  } else if (!device.HasSession(runner_.session())) {
    End(SessionClosedUnder(runner_.session()));
    return true;
  }
  const std::shared_ptr<ReplySink> sink = shared_from_this();
  absl::Time clock = absl::Now();
  // Note [Claimed executes]: a command is claimed under mu_ before it runs, after the stream's
  // state is looked at: has it ended, do its replies pile up (then it parks). An execute answers
  // nothing, so it cannot pile replies up: the executes that follow it are claimed with it, up to
  // kExecutesPerClaim and the turn's budget, and run without taking mu_ (a lock a command was ~9%
  // of the CPU backend's loop per tiny execute); a stream that ends meanwhile runs at most that
  // many more. Each command leaves pending_commands_ as it starts (an atomic, so that the
  // in-flight quota counts exactly the commands not yet run, not those merely claimed). Every
  // return below happens with no claim left.
  uint64_t claimed = 0;
  // The claimed executes' launches may be held back and sent together (Note [Launch batches],
  // server/compute/cuda/cuda_launch_batch.h): nothing else runs on the device until the last
  // of them has run. Ended on every return.
  struct LaunchBatchScope {
    Device& device;
    bool open = false;
    void Begin() {
      if (!open) device.BeginLaunchBatch();
      open = true;
    }
    void End() {
      if (open) device.EndLaunchBatch();
      open = false;
    }
    ~LaunchBatchScope() { End(); }
  } launches{device};
  while (batch.next < batch.commands.size()) {
    if (budget == 0) return false;  // The turn is over (Note [Stream turns]); the rest waits.
    StreamCommand& command = batch.commands[batch.next];
    if (claimed == 0) {
      absl::MutexLock lock(&mu_);
      if (ending_) return true;
      if (RepliesOverLocked()) {
        parked_ = true;
        return false;
      }
      claimed = 1;
      if (command.kind == StreamCommand::Kind::kExecute) {
        const uint64_t most =
            std::min<uint64_t>({kExecutesPerClaim, budget, batch.commands.size() - batch.next});
        while (claimed < most &&
               batch.commands[batch.next + claimed].kind == StreamCommand::Kind::kExecute) {
          ++claimed;
        }
        if (claimed > 1) launches.Begin();
      }
    }
    --claimed;
    pending_commands_.fetch_sub(1, std::memory_order_relaxed);
    --budget;
    if (IsBulkCreate(command) || IsBulkRead(command)) {
      const bool waits = bulk_->Start(device, runner_, command, *this);
      batch.commands[batch.next] = StreamCommand();
      ++batch.next;
      if (waits) return false;  // Drain steps the transfer until the command is done.
      clock = absl::Now();
      continue;
    }
    const uint64_t seq = command.seq;
    RunMetered(device, command, batch.arrival, sink, clock);
    if (claimed == 0) launches.End();
    bulk_->Passed(seq);
    // A create's payload is freed now; the rest later, off the loop (Note [Spent commands]).
    if (!command.data.empty()) batch.commands[batch.next] = StreamCommand();
    ++batch.next;
  }
  return true;
}

void StreamState::MaybeReadLocked() {
  if (finished_ || ending_ || read_in_flight_ || read_closed_ || InFlightOverLocked()) return;
  read_in_flight_ = true;
  wire_->StartRead(&incoming_);
}

void StreamState::MaybeWriteLocked() {
  if (finished_ || ending_ || write_in_flight_) return;
  if (opened_.has_value()) {
    ToWire(*opened_, writing_.mutable_opened());
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
  stream_metrics().bytes_sent.fetch_add(writing_.ByteSizeLong(), std::memory_order_relaxed);
  wire_->StartWrite(&writing_);
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
  if (bulk_ != nullptr) bulk_->EndAll(status);
  stream_metrics().codes.Count(status.code());
  wire_->Finish(status);
  wire_ = nullptr;
  service_->Forget(this);
}

SessionStreamService::SessionStreamService(std::vector<DeviceLoop*> loops, RequestLimits limits,
                                           SessionStreamLimits stream_limits, Metrics* metrics)
    : loops_(std::move(loops)),
      limits_(limits),
      stream_limits_(stream_limits),
      own_metrics_(metrics == nullptr ? std::make_unique<Metrics>() : nullptr),
      metrics_(metrics == nullptr ? own_metrics_.get() : metrics) {}

SessionStreamService::~SessionStreamService() = default;

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* SessionStreamService::Session(
    grpc::CallbackServerContext* ctx) {
  auto* reactor = new GrpcStreamWire(ctx);
  auto state = std::make_shared<StreamState>(this, reactor);
  reactor->Bind(state);
  {
    absl::MutexLock lock(&mu_);
    open_.emplace(state.get(), state);
  }
  // A stream opens a session: it needs OpenSession, and each command its own RPC.
  absl::StatusOr<PrincipalPtr> principal =
      auth_ != nullptr ? auth_->Authorize(*ctx, "OpenSession") : PrincipalPtr();
  if (!principal.ok()) {
    state->End(principal.status());
    return reactor;
  }
  state->SetPrincipal(*std::move(principal));
  // Registered first: a stream that ends at once (draining) forgets itself.
  state->Start(draining_.load(std::memory_order_acquire));
  return reactor;
}

std::shared_ptr<StreamEvents> SessionStreamService::Attach(StreamWire* wire,
                                                           PrincipalPtr principal) {
  auto state = std::make_shared<StreamState>(this, wire);
  {
    absl::MutexLock lock(&mu_);
    open_.emplace(state.get(), state);
  }
  state->SetPrincipal(std::move(principal));
  state->Start(draining_.load(std::memory_order_acquire));
  return state;
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
