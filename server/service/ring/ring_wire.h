#pragma once

// RingWire: the daemon's end of one command ring (Note [Command ring], common/shm_ring.h), the wire
// under one session stream (server/service/stream/stream_wire.h). One thread per ring reads the
// client's SessionRequests out of the command ring, parses them (the stream then converts and
// checks them on this thread: nothing of it reaches the device loop) and hands them to the
// stream; responses go into the reply ring as soon as the stream writes them, from the thread that
// writes them (the loop, or a backend completion), so a reply costs no thread hop. The thread
// sleeps on the daemon's doorbell when there is nothing to do, after an optional short spin.
//
// What the client can do to it (Note [Command ring]): corrupt the ring (the stream ends DATA_LOSS
// naming what), stop reading replies (the stream stops reading commands: Note [Stream
// backpressure]), flood the doorbell (its own ring's thread wakes, nothing else), steal the
// doorbell's count or make it blocking (the thread then sleeps until the next wake-up, which
// the listener or the stream also gives), or hang up (the stream ends CANCELLED).

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/shm_ring.h"
#include "server/channel/shared_region.h"
#include "server/service/stream/stream_wire.h"

namespace cubed {

struct RingWireOptions {
  uint64_t max_request_bytes = uint64_t{64} << 20;  // Largest SessionRequest (--max_message_bytes).
  absl::Duration spin = absl::ZeroDuration();       // Spin before sleeping.
  // How long Finish waits for room for the end record in a reply ring the client does not read.
  absl::Duration finish_timeout = absl::Seconds(2);
};

// Thread-safe. Destroy it only once finished() (or after Stop).
class RingWire final : public StreamWire {
 public:
  // `file` is the mapped ring file, `memory` its checked header (ReadRingHeader). Takes the three
  // eventfds (the client has its own copies of them): the daemon's doorbell, the client's reply
  // and space doorbells.
  RingWire(std::unique_ptr<SharedRegion> file, RingMemory memory, int daemon_doorbell,
           int reply_doorbell, int space_doorbell, RingWireOptions options);
  ~RingWire() override;  // Stops.

  // Starts the thread, which reports to `events` (the stream Attach returned).
  void Start(std::shared_ptr<StreamEvents> events);
  // The client closed its connection: the stream ends CANCELLED. Any thread.
  void Hangup();
  // The thread ended: the stream finished and its end record was written (or could not be).
  bool finished() const { return finished_.load(std::memory_order_acquire); }
  // Ends the thread without waiting for the stream (daemon shutdown after the streams drained).
  void Stop();

  void StartRead(RequestDecoder* into) override;
  void StartWrite(const v1::SessionResponse* response) override;
  void Finish(const absl::Status& status) override;

 private:
  void Run();
  // Wakes the thread (unless it is the caller).
  void WakeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends what fits of the write in progress; on completion rings the client.
  void ContinueWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rings the client's reply (space) doorbell when it sleeps on it.
  void RingClientReply();
  void RingClientSpace();
  // Sleeps until a doorbell or `deadline`, spinning first (`spin` allowed).
  void Sleep(absl::Time deadline, bool want_read, bool want_room);

  std::unique_ptr<SharedRegion> file_;
  RingMemory memory_;
  const int daemon_doorbell_;
  const int reply_doorbell_;
  const int space_doorbell_;
  const RingWireOptions options_;
  RingReader commands_;  // The ring thread only.
  std::thread thread_;
  std::thread::id thread_id_;
  std::shared_ptr<StreamEvents> events_;
  std::atomic<bool> finished_{false};
  std::atomic<uint32_t> kicked_{0};  // Set by wakers, so that a spinning thread sees them.

  absl::Mutex mu_;
  RingWriter replies_ ABSL_GUARDED_BY(mu_);
  bool sleeping_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  RequestDecoder* read_into_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool requests_done_ ABSL_GUARDED_BY(mu_) = false;  // The client half-closed.
  // The write in progress: its serialized bytes and what is not in the ring yet.
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool write_done_ ABSL_GUARDED_BY(mu_) = false;  // Written: OnWriteDone is due.
  std::string write_bytes_ ABSL_GUARDED_BY(mu_);
  absl::string_view write_rest_ ABSL_GUARDED_BY(mu_);
  // Broken: hung up or corrupt. Nothing more is read or written, except the end record when
  // only the command ring is corrupt.
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool replies_usable_ ABSL_GUARDED_BY(mu_) = true;
  absl::Status broken_status_ ABSL_GUARDED_BY(mu_);
  bool broken_reported_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status finish_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cubed
