#include "client/stream_transport.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "common/thread_name.h"

namespace cubed {
namespace {

// The transport whose reader thread this is (Note [Answering commands write through]).
thread_local const StreamTransport* reading_here = nullptr;

}  // namespace

absl::StatusOr<std::unique_ptr<StreamTransport>> StreamTransport::Open(
    std::unique_ptr<SessionWire> wire, Options options) {
  std::unique_ptr<StreamTransport> t(new StreamTransport());
  if (!wire->direct() && options.resume_timeout > absl::ZeroDuration()) {  // Note [Stream resume].
    t->reconnect_ = std::move(options.reconnect);
    t->resume_timeout_ = options.resume_timeout;
  }
  t->call_timeout_ = options.call_timeout;
  t->max_request_bytes_ = std::max<size_t>(1, options.max_request_bytes);
  t->batch_bytes_ = std::min(kBatchBytes, t->max_request_bytes_);
  t->wire_ = std::move(wire);
  v1::SessionRequest open;
  open.mutable_open()->set_device(options.device);
  open.mutable_open()->set_lease_ms(options.lease_ms);
  v1::SessionResponse response;
  if (!t->wire_->Write(open) || !t->wire_->Read(&response)) {
    // The call is over (a failed Write or Read says so): Finish returns the daemon's status
    // (e.g. UNAUTHENTICATED), which a Cancel here would replace with CANCELLED.
    absl::Status s = t->wire_->Finish();
    if (s.ok()) s = absl::UnavailableError("SessionStream: the daemon ended the stream at open");
    t->closed_ = true;
    return s;
  }
  if (!response.has_opened()) {
    t->wire_->Cancel();
    (void)t->wire_->Finish();
    t->closed_ = true;
    return absl::InternalError("SessionStream: the first response carries no `opened`");
  }
  t->opened_ = response.opened();
  {
    absl::MutexLock lock(&t->mu_);
    t->next_id_ = t->opened_.first_client_id();
  }
  StreamTransport* raw = t.get();
  t->direct_ = t->wire_->direct();
  if (t->direct_) {
    absl::MutexLock lock(&t->mu_);
    t->writer_done_ = true;  // No writer thread: Send writes (Note [Stream batching]).
  } else {
    t->writer_ = std::thread([raw] { raw->WriterLoop(); });
  }
  t->reader_ = std::thread([raw] { raw->ReaderLoop(); });
  t->watchdog_ = std::thread([raw] { raw->WatchdogLoop(); });
  return t;
}

StreamTransport::~StreamTransport() {
  if (!closed_) Close(absl::Seconds(60));
}

void StreamTransport::Close(absl::Duration timeout) {
  if (closed_) return;
  closed_ = true;
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
    wake_writer_.SignalAll();
  }
  if (writer_.joinable()) writer_.join();
  if (direct_) {
    absl::MutexLock write_lock(&write_mu_);
    bool broken;
    {
      absl::MutexLock lock(&mu_);
      broken = broken_;
    }
    if (!broken) wire_->WritesDone();
  }
  bool ended = false;
  {
    absl::MutexLock lock(&mu_);
    ended = mu_.AwaitWithTimeout(absl::Condition(&ended_), timeout);
  }
  if (!ended) {
    SessionWire* wire;  // A resume may replace wire_; the old one stays alive (retired_wires_).
    {
      absl::MutexLock lock(&mu_);
      wire = wire_.get();
    }
    wire->Cancel();
  }
  if (reader_.joinable()) reader_.join();
  if (!stop_watchdog_.HasBeenNotified()) stop_watchdog_.Notify();
  if (watchdog_.joinable()) watchdog_.join();
}

uint64_t StreamTransport::NextId() {
  absl::MutexLock lock(&mu_);
  return next_id_++;
}

absl::Status StreamTransport::Send(v1::Command command, Callback on_reply, uint64_t* seq_out,
                                   absl::Duration timeout) {
  const Outgoing outgoing{&command, {}};
  if (direct_) return SendDirect(outgoing, std::move(on_reply), seq_out, timeout);
  return Enqueue(outgoing, std::move(on_reply), seq_out, timeout);
}

absl::Status StreamTransport::SendInPlace(v1::Command& command, Callback on_reply) {
  const Outgoing outgoing{&command, {}};
  if (direct_) return SendDirect(outgoing, std::move(on_reply), nullptr, absl::ZeroDuration());
  return Enqueue(outgoing, std::move(on_reply), nullptr, absl::ZeroDuration());
}

absl::Status StreamTransport::SendSerialized(absl::string_view command) {
  const Outgoing outgoing{nullptr, command};
  if (direct_) return SendDirect(outgoing, nullptr, nullptr, absl::ZeroDuration());
  return Enqueue(outgoing, nullptr, nullptr, absl::ZeroDuration());
}

absl::Status StreamTransport::Outgoing::AppendFramed(uint64_t seq, std::string* out) const {
  if (parsed == nullptr) return AppendSerializedCommandBytes(serialized, seq, out);
  parsed->set_seq(seq);
  return AppendSerializedCommand(*parsed, out);
}

absl::Status StreamTransport::Enqueue(const Outgoing& command, Callback on_reply, uint64_t* seq_out,
                                      absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  for (;;) {  // Checked again after each wait: the stream may end or close meanwhile.
    if (ended_) return end_status_;
    if (closing_) return absl::FailedPreconditionError("session stream is closing");
    if (queued_ < kMaxQueued || broken_) break;
    space_.Wait(&mu_);
  }
  const uint64_t seq = next_seq_;
  if (queue_.empty() || queue_.back().commands >= kMaxPerRequest) NewBatch();
  std::string& tail = queue_.back().request;
  const size_t before = tail.size();
  absl::Status refused = command.AppendFramed(seq, &tail);
  if (refused.ok() && tail.size() - before > max_request_bytes_) {
    refused = absl::InvalidArgumentError(
        absl::StrCat("command of ", tail.size() - before, " bytes: over the ", max_request_bytes_,
                     " bytes a request may carry (ClientOptions::max_message_bytes)"));
    tail.resize(before);
  }
  if (!refused.ok()) {
    if (queue_.back().commands == 0) queue_.pop_back();
    return refused;
  }
  if (queue_.back().commands > 0 && tail.size() > batch_bytes_) {
    // Past the batch's bytes: the command starts the next one (Note [Serialized queue]). A
    // deque's emplace_back leaves references to its other elements valid.
    NewBatch();
    queue_.back().request.append(tail, before, std::string::npos);
    tail.resize(before);
  }
  Batch& batch = queue_.back();
  ++next_seq_;
  if (seq_out != nullptr) *seq_out = seq;
  if (queued_ == 0) first_queued_ = absl::Now();
  ++queued_;
  ++batch.commands;
  batch.last_seq = seq;
  if (command.is_sync()) {
    batch.syncs.push_back(seq);
    if (on_reply != nullptr && !lost_commands_.ok()) {
      // Note [Stream resume]: the first sync after a resume reports the commands it lost.
      on_reply = [lost = std::exchange(lost_commands_, absl::OkStatus()),
                  inner = std::move(on_reply)](absl::StatusOr<v1::Reply*> reply) {
        inner(reply.ok() ? absl::StatusOr<v1::Reply*>(lost) : std::move(reply));
      };
    }
  }
  if (on_reply != nullptr) {
    pending_.emplace(seq, std::move(on_reply));
    deadlines_.emplace(seq,
                       absl::Now() + (timeout != absl::ZeroDuration() ? timeout : call_timeout_));
    push_now_ = true;
    if (MayWriteThrough()) {
      WriteThrough(seq);  // Note [Answering commands write through].
    } else {
      wake_writer_.Signal();
    }
  } else if (queued_ == 1 || queued_ >= kBatchCommands) {
    wake_writer_.Signal();
  }
  return absl::OkStatus();
}

bool StreamTransport::MayWriteThrough() const {
  return !writing_ && !broken_ && !resuming_ && !closing_ && !writer_done_ &&
         reading_here != this && queue_.size() == 1 &&
         unanswered_bytes_ + queue_.front().request.size() <= kWriteThroughBytes;
}

void StreamTransport::WriteThrough(uint64_t seq) {
  while (!queue_.empty() && !broken_) {
    const bool last = queue_.front().last_seq >= seq;
    WriteFront();
    if (last) break;
  }
  if (!queue_.empty()) wake_writer_.Signal();  // Later commands of other threads.
}

void StreamTransport::WriteFront() {
  Batch batch = std::move(queue_.front());
  queue_.pop_front();
  queued_ -= batch.commands;
  written_seq_ = batch.last_seq;
  if (queue_.empty()) {
    push_now_ = false;
  } else {
    first_queued_ = absl::Now();
  }
  space_.SignalAll();
  unanswered_writes_.emplace_back(batch.last_seq, batch.request.size());
  unanswered_bytes_ += batch.request.size();
  if (unanswered_writes_.size() > kMaxUnansweredWrites) {
    const size_t oldest = unanswered_writes_.front().second;  // Answered with the next one.
    unanswered_writes_.pop_front();
    unanswered_writes_.front().second += oldest;
  }
  writing_ = true;
  SessionWire* wire = wire_.get();  // A resume replaces wire_ only while nobody writes.
  mu_.Unlock();
  const bool ok = wire->WriteSerialized(batch.request);
  mu_.Lock();
  writing_ = false;
  if (!ok) broken_ = true;
  // A buffer grown past the batch bound (a command that went alone) is not kept.
  if (spare_buffers_.size() < 2 && batch.request.capacity() <= 2 * batch_bytes_) {
    batch.request.clear();  // Keeps its capacity.
    spare_buffers_.push_back(std::move(batch.request));
  }
  wake_writer_.Signal();  // A writer waiting for !writing_, or Close's.
}

void StreamTransport::NoteAnswered(uint64_t seq) {
  while (!unanswered_writes_.empty() && unanswered_writes_.front().first <= seq) {
    unanswered_bytes_ -= unanswered_writes_.front().second;
    unanswered_writes_.pop_front();
  }
}

void StreamTransport::NewBatch() {
  Batch& batch = queue_.emplace_back();
  if (!spare_buffers_.empty()) {
    batch.request = std::move(spare_buffers_.back());
    spare_buffers_.pop_back();
  }
}

absl::Status StreamTransport::SendDirect(const Outgoing& command, Callback on_reply,
                                         uint64_t* seq_out, absl::Duration timeout) {
  absl::MutexLock write_lock(&write_mu_);
  const uint64_t seq = direct_seq_;
  // Framed as a one-command SessionRequest in a reused buffer (no allocation once it has grown),
  // before anything is registered, and checked with the stream's state under one lock of mu_.
  direct_buffer_.clear();
  const absl::Status framed = command.AppendFramed(seq, &direct_buffer_);
  {
    absl::MutexLock lock(&mu_);
    if (ended_) return end_status_;
    if (closing_) return absl::FailedPreconditionError("session stream is closing");
    if (broken_) return absl::UnavailableError("SessionStream: the command ring broke");
    if (!framed.ok()) return framed;  // Refused alone: nothing was registered or written.
    if (on_reply != nullptr) {
      pending_.emplace(seq, std::move(on_reply));
      deadlines_.emplace(seq,
                         absl::Now() + (timeout != absl::ZeroDuration() ? timeout : call_timeout_));
    }
  }
  direct_seq_ = seq + 1;
  if (seq_out != nullptr) *seq_out = seq;
  if (!wire_->WriteSerialized(direct_buffer_)) {
    absl::MutexLock lock(&mu_);
    broken_ = true;  // The reader sees the end and fails what is pending.
  }
  return absl::OkStatus();
}

void StreamTransport::Cancel() {
  SessionWire* wire;  // A resume may replace wire_; the old one stays alive (retired_wires_).
  {
    absl::MutexLock lock(&mu_);
    wire = wire_.get();
  }
  wire->Cancel();
}

StreamTransport::ResumeState StreamTransport::resume_state() {
  absl::MutexLock lock(&mu_);
  return ResumeState{resumes_, resuming_};
}

void StreamTransport::Push() {
  if (direct_) return;  // Nothing waits in a queue.
  absl::MutexLock lock(&mu_);
  if (queued_ == 0) return;
  push_now_ = true;
  wake_writer_.Signal();
}

void StreamTransport::WriterLoop() {
  NameThisThread("cubed-sdk-write");
  absl::MutexLock lock(&mu_);
  for (;;) {
    if (broken_) {
      if (reconnect_ == nullptr || ended_ || (closing_ && !resuming_)) break;
      // Note [Stream resume]: the reader decides whether a new wire carries on.
      writer_parked_ = true;
      mu_.Await(absl::Condition(this, &StreamTransport::WriterMayGoOn));
      writer_parked_ = false;
      continue;
    }
    if (writing_) {  // A sender writes through (Note [Answering commands write through]).
      wake_writer_.Wait(&mu_);
      continue;
    }
    if (queue_.empty()) {
      if (closing_) break;
      wake_writer_.Wait(&mu_);
      continue;
    }
    if (!closing_ && !push_now_ && queued_ < kBatchCommands) {
      const absl::Time due = first_queued_ + kBatchDelay;
      if (absl::Now() < due) {
        wake_writer_.WaitWithDeadline(&mu_, due);
        continue;
      }
    }
    WriteFront();
  }
  if (!broken_) {
    mu_.Unlock();
    wire_->WritesDone();
    mu_.Lock();
  }
  writer_done_ = true;
  space_.SignalAll();
}

void StreamTransport::ReaderLoop() {
  NameThisThread("cubed-sdk-read");
  reading_here = this;
  v1::SessionResponse response;
  for (;;) {
    if (ReadWire(response)) continue;  // A resume: read the new wire.
    return;
  }
}

bool StreamTransport::ReadWire(v1::SessionResponse& response) {
  while (wire_->Read(&response)) {
    for (v1::Reply& reply : *response.mutable_replies()) {
      Callback callback;
      {
        absl::MutexLock lock(&mu_);
        NoteAnswered(reply.seq());
        auto it = pending_.find(reply.seq());
        if (it == pending_.end()) continue;
        callback = std::move(it->second);
        pending_.erase(it);
        deadlines_.erase(reply.seq());
      }
      callback(&reply);
    }
  }
  {
    absl::MutexLock lock(&mu_);
    broken_ = true;
    wake_writer_.SignalAll();
    space_.SignalAll();
    mu_.Await(absl::Condition(this, &StreamTransport::WriterIdle));
  }
  absl::Status status = wire_->Finish();
  if (status.ok()) status = absl::FailedPreconditionError("the session stream is closed");
  if (Resume(status)) return true;
  {
    absl::MutexLock lock(&mu_);
    // Note [Session lost]: the daemon ended the stream without being asked (it stopped, was
    // killed or restarted): the session and its handles are gone, and the error says so, naming
    // the session, beside what the wire reported.
    if (status.code() == absl::StatusCode::kUnavailable && !closing_) {
      status = absl::UnavailableError(absl::StrCat(
          "session ", opened_.session(), " lost: ", status.message(),
          " (the daemon ended the stream: it stopped or restarted, and the session's handles are "
          "gone; connect again)"));
    }
    ended_ = true;
    end_status_ = status;
  }
  FailAll(status);
  return false;
}

bool StreamTransport::Resume(absl::Status& status) {
  uint64_t written = 0;
  {
    absl::MutexLock lock(&mu_);
    if (reconnect_ == nullptr || closing_ || status.code() != absl::StatusCode::kUnavailable) {
      return false;
    }
    resuming_ = true;
    written = written_seq_;
  }
  const absl::Time give_up = absl::Now() + resume_timeout_;
  v1::SessionResponse::Opened opened;
  absl::StatusOr<std::unique_ptr<SessionWire>> wire = ResumeOnce(&opened);
  // UNAVAILABLE: no daemon yet; CANCELLED: the old one cancelled the attempt while it stopped.
  auto retry = [](const absl::Status& s) {
    return s.code() == absl::StatusCode::kUnavailable || s.code() == absl::StatusCode::kCancelled;
  };
  while (!wire.ok() && retry(wire.status()) && absl::Now() < give_up) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&closing_), absl::Milliseconds(50))) break;
    }
    wire = ResumeOnce(&opened);
  }
  std::vector<std::pair<uint64_t, Callback>> cut;
  uint64_t resumed = 0;
  {
    absl::MutexLock lock(&mu_);
    resuming_ = false;
    if (!wire.ok()) {
      // Seconds as the Python SDK writes them ("20 s"), so that both say the same.
      status = absl::UnavailableError(
          absl::StrCat(status.message(), "; resuming the session for ",
                       absl::StrFormat("%g s", absl::ToDoubleSeconds(resume_timeout_)),
                       " failed: ", wire.status().message()));
      return false;
    }
    retired_wires_.push_back(std::move(wire_));
    wire_ = *std::move(wire);
    unanswered_writes_.clear();  // The new wire has nothing unread.
    unanswered_bytes_ = 0;
    ++resumes_;
    resumed = opened.resumed_seq();
    if (written > resumed) {
      const absl::Status lost = absl::UnavailableError(absl::StrCat(
          "commands ", resumed + 1, " .. ", written, " of session ", opened_.session(),
          " did not run: the daemon restarted before them (checkpoint and restore); the handles "
          "they would have made do not exist"));
      // The first sync still queued reports it (one queued during the resume would otherwise
      // answer OK); without one, the next sync sent.
      bool reported = false;
      for (const Batch& batch : queue_) {
        for (const uint64_t sync : batch.syncs) {
          auto it = pending_.find(sync);
          if (it == pending_.end()) continue;
          it->second = [lost, inner = std::move(it->second)](absl::StatusOr<v1::Reply*> reply) {
            inner(reply.ok() ? absl::StatusOr<v1::Reply*>(lost) : std::move(reply));
          };
          reported = true;
          break;
        }
        if (reported) break;
      }
      if (!reported) lost_commands_ = lost;
    }
    // Replies still due for commands already written are lost with the old wire.
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->first > written) {
        ++it;
        continue;
      }
      deadlines_.erase(it->first);
      cut.emplace_back(it->first, std::move(it->second));
      pending_.erase(it++);
    }
    broken_ = false;
  }
  std::sort(cut.begin(), cut.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [seq, callback] : cut) {
    callback(absl::UnavailableError(
        seq <= resumed
            ? absl::StrCat("command ", seq, " ran, but the daemon restarted before its reply")
            : absl::StrCat("command ", seq, " did not run: the daemon restarted before it")));
  }
  return true;
}

absl::StatusOr<std::unique_ptr<SessionWire>> StreamTransport::ResumeOnce(
    v1::SessionResponse::Opened* opened) {
  absl::StatusOr<std::unique_ptr<SessionWire>> made = reconnect_();
  if (!made.ok()) return made.status();
  std::unique_ptr<SessionWire> wire = *std::move(made);
  v1::SessionRequest open;
  open.mutable_open()->set_resume_session(opened_.session());
  v1::SessionResponse response;
  if (!wire->Write(open) || !wire->Read(&response)) {
    absl::Status s = wire->Finish();
    if (s.ok()) s = absl::UnavailableError("the daemon ended the stream at the resume");
    return s;
  }
  if (!response.has_opened() || response.opened().session() != opened_.session()) {
    wire->Cancel();
    (void)wire->Finish();
    return absl::InternalError("SessionStream: the resume was answered without the session");
  }
  *opened = response.opened();
  return wire;
}

void StreamTransport::WatchdogLoop() {
  NameThisThread("cubed-sdk-watch");
  for (;;) {
    std::vector<std::pair<uint64_t, Callback>> expired;
    if (stop_watchdog_.WaitForNotificationWithTimeout(absl::Milliseconds(20))) return;
    {
      absl::MutexLock lock(&mu_);
      const absl::Time now = absl::Now();
      while (!deadlines_.empty() && deadlines_.begin()->second <= now) {
        const uint64_t seq = deadlines_.begin()->first;
        deadlines_.erase(deadlines_.begin());
        auto it = pending_.find(seq);
        if (it == pending_.end()) continue;
        expired.emplace_back(seq, std::move(it->second));
        pending_.erase(it);
      }
    }
    for (auto& [seq, callback] : expired) {
      callback(absl::DeadlineExceededError(
          absl::StrCat("SessionStream: no reply to command ", seq, " within ",
                       absl::FormatDuration(call_timeout_), " (ClientOptions::timeout)")));
    }
  }
}

void StreamTransport::FailAll(const absl::Status& status) {
  std::unordered_map<uint64_t, Callback> pending;
  {
    absl::MutexLock lock(&mu_);
    pending.swap(pending_);
  }
  std::vector<std::pair<uint64_t, Callback>> ordered(std::make_move_iterator(pending.begin()),
                                                     std::make_move_iterator(pending.end()));
  std::sort(ordered.begin(), ordered.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [seq, callback] : ordered) callback(status);
}

}  // namespace cubed
