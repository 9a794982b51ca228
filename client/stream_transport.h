#pragma once

// StreamTransport: the client end of the session stream (proto/cubed/v1/session.proto), which
// cubed::Client uses unless ClientOptions::transport is kUnary, over a SessionWire (gRPC, or the
// daemon's command ring: session_wire.h).
//
// Note [Stream batching]: commands are queued and a writer thread sends them as one
// SessionRequest when kBatchCommands are queued, as soon as a command that answers is queued
// (reads and syncs should not wait; its sender writes it: Note [Answering commands write
// through]), or kBatchDelay after the first command of a batch was queued. Over a direct wire
// (the command ring: SessionWire::direct) there is no queue and no writer thread: Send writes
// each command itself, in seq order, and the daemon gathers what arrived into its batches. A reader
// thread resolves the callbacks of answering commands by their seq. When the stream ends (error or
// close) every pending callback gets the stream's status, and so does every command queued later
// (but see Note [Stream resume]).
//
// Note [Answering commands write through]: a command that answers (a read, a sync) is written
// by the thread that sends it, instead of waking the writer thread to write it: its caller waits
// for the reply anyway, and the writer's wake-up was a thread hop on every round trip (tens of
// microseconds on a loaded machine). Only when that write cannot wait for the daemon: no write
// is under way, the command's batch is the only one queued, and it fits, with every byte written
// before it that the daemon has not answered past yet, in kWriteThroughBytes (half of the 64 KiB
// window an HTTP/2 stream opens with). A backlog the daemon has stopped reading (its in-flight
// quota: Note [Stream backpressure]) would otherwise hold the sender inside Send, past its call's
// deadline, which the watchdog can only enforce on a caller that waits on the reply; such a
// command goes to the writer thread as before. One write at a time (`writing_`), in queue order;
// the writer thread waits while a sender writes. Not on the reader thread (a callback sending),
// nor once the stream closes (the writer may be ending it).
//
// Note [Serialized queue]: a queued command is serialized as Send queues it, straight from the
// caller's message (a stack arena's: Note [Commands on the stack] in stack_command.h), onto the end
// of the newest batch: the bytes of a SessionRequest (AppendSerializedCommand), which the writer
// hands to the wire as they are (SessionWire::WriteSerialized). No command is copied onto the
// heap, none crosses threads as an object, and written batches' buffers are reused: the sending
// thread's allocations and the writer's frees were the bound of P2 over TCP (a dozen mallocs a
// command, freed on another thread). A batch holds at most kMaxPerRequest commands and
// kBatchBytes (or Options::max_request_bytes, if less): a command that would take it past that
// starts the next batch (its bytes moved there), and one larger than that goes alone.
//
// Note [Stream resume]: with a WireFactory (ClientOptions::resume_timeout), a stream that the
// daemon ended UNAVAILABLE without being asked (it drained with a checkpoint and a new daemon
// restores the session: docs/reliability.md, "Checkpoint and restore") is resumed instead of
// ended. The reader thread parks the writer, fails every command awaiting a reply (UNAVAILABLE,
// saying whether it ran: seq <= opened.resumed_seq), and opens new wires with
// open {resume_session} until one succeeds or resume_timeout passes. Commands still queued are
// then sent on the new wire; commands written after resumed_seq never ran, and the next sync
// fails UNAVAILABLE naming them, so none is lost silently. A refusal (the session is not there:
// the new daemon did not restore it) or the timeout ends the stream as without resume. Only
// queued (gRPC) wires resume; a direct wire (the command ring) ends as before.

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "client/session_wire.h"
#include "cubed/v1/session.pb.h"

namespace cubed {

class StreamTransport {
 public:
  // Receives the reply of one answering command, or the stream's error when it ended first.
  using Callback = std::function<void(absl::StatusOr<v1::Reply*>)>;

  static constexpr size_t kBatchCommands = 256;
  static constexpr absl::Duration kBatchDelay = absl::Microseconds(200);
  // Commands per SessionRequest allowed by the daemon.
  static constexpr size_t kMaxPerRequest = 4096;
  // Queued commands past which Send() waits for the writer (bounds client memory).
  static constexpr size_t kMaxQueued = 65536;
  // Serialized bytes a batch grows to at most (Note [Serialized queue]), unless
  // Options::max_request_bytes is less.
  static constexpr size_t kBatchBytes = size_t{4} << 20;
  // Note [Answering commands write through]: unanswered bytes a sender's own write may leave.
  static constexpr size_t kWriteThroughBytes = size_t{32} << 10;

  // Opens new wires for Note [Stream resume].
  using WireFactory = std::function<absl::StatusOr<std::unique_ptr<SessionWire>>()>;
  struct Options {
    uint32_t device = 0;
    uint64_t lease_ms = 0;
    // A command that answers and gets no reply within `call_timeout` of being queued has its
    // callback resolved with DEADLINE_EXCEEDED (a later reply is dropped): every call has a
    // deadline, as on the unary path. The stream itself has none.
    absl::Duration call_timeout = absl::Seconds(60);
    // The largest request the channel sends (ClientOptions::max_message_bytes): batches stay
    // within it, and Send refuses a queued command larger than it (INVALID_ARGUMENT) instead of
    // letting gRPC end the stream.
    size_t max_request_bytes = kBatchBytes;
    // `reconnect` (null: never) and `resume_timeout` turn on Note [Stream resume] for a queued
    // (not direct) wire.
    WireFactory reconnect;
    absl::Duration resume_timeout = absl::ZeroDuration();
  };
  // Opens the session on `options.device` over `wire`; returns once `opened` arrived.
  static absl::StatusOr<std::unique_ptr<StreamTransport>> Open(std::unique_ptr<SessionWire> wire,
                                                               Options options);

  // Half-closes the stream (the daemon runs what was sent, then closes the session) and waits up
  // to `timeout` for it to end; cancels it after that.
  void Close(absl::Duration timeout);
  // Close(60 s) unless closed.
  ~StreamTransport();

  StreamTransport(const StreamTransport&) = delete;
  StreamTransport& operator=(const StreamTransport&) = delete;

  const v1::SessionResponse::Opened& opened() const { return opened_; }

  // A fresh client id (first_client_id upward). Thread-safe.
  uint64_t NextId();

  // Queues `command` (its seq is assigned here). `on_reply`, if set, receives its reply; then the
  // queue is sent at once. Returns the stream's error once it ended (then `on_reply` is not
  // called); INVALID_ARGUMENT, queuing nothing, for a command larger than a request may be
  // (Options::max_request_bytes; 2 GiB on a direct wire). Waits while kMaxQueued commands are
  // queued; on a direct wire (the command ring) it writes the command itself and waits for room
  // in the ring. Thread-safe; commands queued by one thread go out in that order. `seq_out`, if
  // set, receives the command's seq (for joining a bulk transfer to it). `timeout` replaces the
  // call timeout for this reply when not zero (a bulk command's reply comes after its transfer);
  // replies are due in seq order, so a later command's DEADLINE_EXCEEDED may come that late.
  absl::Status Send(v1::Command command, Callback on_reply = nullptr, uint64_t* seq_out = nullptr,
                    absl::Duration timeout = absl::ZeroDuration());
  // Send for a command the caller keeps (one built on a stack arena: Note [Commands on the
  // stack] in stack_command.h): it is serialized where it is, with no copy (Note [Serialized
  // queue]). Sets `command`'s seq.
  absl::Status SendInPlace(v1::Command& command, Callback on_reply = nullptr);
  // Send for a command already serialized (AppendSerializedCommandBytes: its seq is appended),
  // which the caller vouches parses as a v1::Command, does not answer and is no sync (Note
  // [Prepared C ABI launches] in client/c_api/cubed_client_c_launch.cc). Errors as Send's.
  absl::Status SendSerialized(absl::string_view command);

  // Sends what is queued now (without waiting for the interval).
  void Push();

  // Ends the stream at once from this side (SessionWire::Cancel), from any thread: what awaits a
  // reply fails CANCELLED, later sends fail, and the daemon closes the session (it does not
  // resume). Close still joins the threads.
  void Cancel();

  // Note [Stream resume]: the resumes that succeeded so far, and whether one is in progress (the
  // wire ended and new ones are being tried). Thread-safe.
  struct ResumeState {
    uint64_t resumes = 0;
    bool resuming = false;
  };
  ResumeState resume_state();

 private:
  StreamTransport() = default;
  // What Enqueue and SendDirect frame: a parsed command (its seq set as it is framed) or, where
  // `parsed` is null, `serialized`, one that never answers and is no sync.
  struct Outgoing {
    v1::Command* parsed = nullptr;
    absl::string_view serialized;
    bool is_sync() const { return parsed != nullptr && parsed->has_sync(); }
    // AppendSerializedCommand(Bytes) of the command with `seq`.
    absl::Status AppendFramed(uint64_t seq, std::string* out) const;
  };
  void WriterLoop();
  // Serializes `command` onto the queue for the writer thread (Note [Serialized queue]).
  absl::Status Enqueue(const Outgoing& command, Callback on_reply, uint64_t* seq_out,
                       absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);
  // Appends an empty batch to queue_, with a spare buffer if there is one.
  void NewBatch() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Note [Answering commands write through]: writes the queued batches up to the one holding
  // `seq` on this thread (mu_ released while each is written).
  void WriteThrough(uint64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Note [Answering commands write through]: whether the sender of the newest batch may write
  // it now.
  bool MayWriteThrough() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Takes the oldest batch off the queue and writes it (mu_ released meanwhile, writing_ set);
  // a failed write marks the stream broken. Queue not empty.
  void WriteFront() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The daemon answered command `seq`: it read every request up to the one that carried it.
  void NoteAnswered(uint64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Send over a direct wire.
  absl::Status SendDirect(const Outgoing& command, Callback on_reply, uint64_t* seq_out,
                          absl::Duration timeout);
  void ReaderLoop();
  // Fails pending callbacks whose deadline passed, until the stream ends or closes.
  void WatchdogLoop();
  // Resolves every pending callback with `status` (the stream ended).
  void FailAll(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  // Note [Stream resume]: after the wire ended with `status`; true when a new wire carries the
  // session on (then wire_ is it), false when the stream ends.
  // A failed resume adds why to `status`.
  bool Resume(absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  // Reads replies until the wire ends; true when a resume replaced it (read again).
  bool ReadWire(v1::SessionResponse& response);
  // Conditions on mu_: the writer is not using the wire; the writer may leave its park.
  bool WriterIdle() const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return (writer_done_ || writer_parked_) && !writing_;
  }
  bool WriterMayGoOn() const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return !broken_ || ended_ || (closing_ && !resuming_);
  }
  // One attempt: a new wire resuming the session, and its `opened`.
  absl::StatusOr<std::unique_ptr<SessionWire>> ResumeOnce(v1::SessionResponse::Opened* opened);

  // Note [Serialized queue]: queued commands, serialized, in seq order.
  struct Batch {
    std::string request;          // A serialized SessionRequest.
    size_t commands = 0;          // How many it carries.
    uint64_t last_seq = 0;        // The seq of its last command.
    std::vector<uint64_t> syncs;  // The seqs of its syncs (Note [Stream resume]).
  };

  std::unique_ptr<SessionWire> wire_;
  v1::SessionResponse::Opened opened_;
  // Note [Stream resume]. Wires replaced by a resume stay alive until the transport goes, since
  // Close may still be cancelling one.
  WireFactory reconnect_;
  absl::Duration resume_timeout_ = absl::ZeroDuration();
  std::vector<std::unique_ptr<SessionWire>> retired_wires_;

  absl::Mutex mu_;
  absl::CondVar wake_writer_;
  absl::CondVar space_;
  std::deque<Batch> queue_ ABSL_GUARDED_BY(mu_);
  size_t queued_ ABSL_GUARDED_BY(mu_) = 0;  // Commands in queue_.
  // Written batches' buffers, cleared, for new batches (no allocation once they have grown).
  std::vector<std::string> spare_buffers_ ABSL_GUARDED_BY(mu_);
  absl::Time first_queued_ ABSL_GUARDED_BY(mu_);
  bool push_now_ ABSL_GUARDED_BY(mu_) = false;
  // A thread (the writer, or a sender writing through) is inside a write of the wire.
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool writer_done_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;       // The reader saw the stream's end.
  absl::Status end_status_ ABSL_GUARDED_BY(mu_);  // Set when ended_ or a write failed.
  bool broken_ ABSL_GUARDED_BY(mu_) = false;      // A write failed or the stream ended.
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;    // Queued sends' (Enqueue).
  // Note [Stream resume]: a resume in progress (the writer parks); the highest seq handed to the
  // wire; the error the next sync reports for commands a resume found lost.
  bool resuming_ ABSL_GUARDED_BY(mu_) = false;
  bool writer_parked_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t written_seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t resumes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status lost_commands_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::unordered_map<uint64_t, Callback> pending_ ABSL_GUARDED_BY(mu_);
  // Deadline of each pending callback, by seq (deadlines grow with seq: one timeout for all).
  std::map<uint64_t, absl::Time> deadlines_ ABSL_GUARDED_BY(mu_);
  absl::Duration call_timeout_ = absl::Seconds(60);
  size_t batch_bytes_ = kBatchBytes;  // Note [Serialized queue].
  size_t max_request_bytes_ = kBatchBytes;
  // Note [Answering commands write through]: the writes the daemon has not answered past yet
  // (each write's last seq and bytes, oldest first; at most kMaxUnansweredWrites, the oldest
  // folded into the next) and their bytes.
  static constexpr size_t kMaxUnansweredWrites = 64;
  std::deque<std::pair<uint64_t, size_t>> unanswered_writes_ ABSL_GUARDED_BY(mu_);
  size_t unanswered_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Set by Close: the watchdog waits on it, not on mu_ with a condition, since while a thread
  // waits on mu_ with a condition every unlock of mu_ (one a direct send) takes the slow path.
  absl::Notification stop_watchdog_;
  std::thread watchdog_;
  bool closed_ = false;  // Close() ran; only touched by the owner.
  std::thread writer_;
  std::thread reader_;
  // Direct wires: Send writes under write_mu_ (taken before mu_, never while waiting on it), so
  // that commands reach the wire in seq order while the reader keeps resolving replies.
  bool direct_ = false;
  absl::Mutex write_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::string direct_buffer_ ABSL_GUARDED_BY(write_mu_);  // SendDirect's serialized command.
  uint64_t direct_seq_ ABSL_GUARDED_BY(write_mu_) = 1;    // The seq SendDirect sends next.
};

}  // namespace cubed
