#pragma once

// RingSessionWire: the client's end of a command ring (Note [Command ring], common/shm_ring.h):
// the session stream's requests go into shared memory and its responses come out of it, with an
// eventfd doorbell only when the other side sleeps. Opened through the daemon's ring socket
// (proto/cubed/v1/ring.proto), whose connection it keeps until it is destroyed.

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/session_wire.h"
#include "client/shared_memory.h"
#include "common/shm_ring.h"

namespace cubed {

struct RingSessionWireOptions {
  uint64_t command_capacity = uint64_t{4} << 20;    // Bytes of the command ring (a power of two).
  uint64_t reply_capacity = uint64_t{4} << 20;      // Bytes of the reply ring (a power of two).
  uint64_t max_response_bytes = uint64_t{1} << 31;  // Largest SessionResponse accepted.
  absl::Duration open_timeout = absl::Seconds(10);  // For the daemon's answer.
};

// Write on one thread, Read on another, Cancel on any (SessionWire's rules).
class RingSessionWire final : public SessionWire {
 public:
  // Opens a ring with the daemon whose ring socket is `ring_socket` (the Unix socket's path plus
  // ".ring"). UNAVAILABLE when the socket cannot be reached or does not answer; the daemon's
  // error (PERMISSION_DENIED, INVALID_ARGUMENT) as it sent it.
  static absl::StatusOr<std::unique_ptr<RingSessionWire>> Open(const std::string& ring_socket,
                                                               RingSessionWireOptions options);
  ~RingSessionWire() override;  // Closes the connection: the daemon ends the stream.

  bool Write(const v1::SessionRequest& request) override;
  bool WriteSerialized(absl::string_view request) override;
  bool Read(v1::SessionResponse* response) override;
  void WritesDone() override;
  absl::Status Finish() override;
  void Cancel() override;
  bool direct() const override { return true; }
  absl::Duration suggested_spin() const override { return spin_; }

 private:
  RingSessionWire() = default;
  // Appends one message, waiting for room; false when the wire broke.
  bool Append(RingChunk kind, absl::string_view bytes);
  // Sleeps on `doorbell` (its waiting word `waiting`) until `ready` or the connection ends;
  // false when it ended.
  template <typename Ready>
  bool Wait(int doorbell, RingOffset waiting, Ready ready);
  // Rings the daemon when it sleeps.
  void RingDaemon();

  std::optional<SharedMemory> file_;  // The ring file; set by Open.
  RingMemory memory_;
  int socket_ = -1;
  int daemon_doorbell_ = -1;
  int reply_doorbell_ = -1;
  int space_doorbell_ = -1;
  absl::Duration spin_ = absl::ZeroDuration();
  std::atomic<bool> cancelled_{false};
  // The writer thread's.
  RingWriter commands_;
  std::string write_buffer_;
  bool write_broken_ = false;
  // The reader thread's.
  RingReader replies_;
  std::string read_buffer_;
  absl::Status end_;    // From the end record, once read.
  bool ended_ = false;  // The end record (or the connection's end) was seen.
};

}  // namespace cubed
