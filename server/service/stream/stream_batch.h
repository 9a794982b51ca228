#pragma once

// StreamBatch: received SessionRequests, converted, waiting for a stream's loop
// (server/service/stream/session_stream.cc), and the coalescing of those that arrive while others
// wait (Note [Coalesced batches] in stream_batch.cc).

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "common/ids.h"
#include "server/auth/principal.h"
#include "server/channel/stream_command.h"

namespace cubed {

// Slots of a principal's quota max_inflight_commands, given back when destroyed. Move-only.
class InflightSlots {
 public:
  InflightSlots() = default;
  InflightSlots(PrincipalPtr principal, uint64_t n) : principal_(std::move(principal)), n_(n) {}
  InflightSlots(InflightSlots&& other) noexcept
      : principal_(std::move(other.principal_)), n_(std::exchange(other.n_, 0)) {}
  InflightSlots& operator=(InflightSlots&& other) noexcept {
    if (this != &other) {
      Give();
      principal_ = std::move(other.principal_);
      n_ = std::exchange(other.n_, 0);
    }
    return *this;
  }
  ~InflightSlots() { Give(); }

  // Takes over `other`'s slots (one stream's batches: one principal).
  void Absorb(InflightSlots&& other) {
    if (principal_ == nullptr) principal_ = std::move(other.principal_);
    n_ += std::exchange(other.n_, 0);
  }

 private:
  void Give() {
    if (principal_ != nullptr && n_ != 0) principal_->ReleaseInflight(n_);
    n_ = 0;
  }
  PrincipalPtr principal_;
  uint64_t n_ = 0;
};

// One received SessionRequest, converted, waiting for the loop.
struct StreamBatch {
  bool open = false;
  uint64_t lease_ms = 0;
  SessionId resume;  // open.resume_session (0: open a new session).
  std::vector<StreamCommand> commands;
  size_t next = 0;         // Commands before this one already ran (a parked batch).
  uint64_t bytes = 0;      // Wire size, for Note [Stream backpressure].
  absl::Time arrival;      // When it was received (metrics: queue time).
  InflightSlots inflight;  // Its slots of the principal's max_inflight_commands.
};

// Moves `incoming`'s commands, bytes and in-flight slots onto the end of `last`, the stream's
// last waiting batch, when it may take them: neither is the open batch, nothing of `last` has run,
// the stream's principal has no in-flight quotas (`quotas` false), and together they hold at most
// kMaxMergedCommands. Returns whether it did; then `incoming` is empty and its vector's room may
// have gone to `recycled` (the wire thread's spare, as StreamState::Recycle keeps it). On the
// stream's wire thread, under the stream's lock. Why: Note [Coalesced batches] in stream_batch.cc.
bool CoalesceInto(StreamBatch& last, StreamBatch& incoming, bool quotas,
                  std::vector<StreamCommand>& recycled);

inline constexpr size_t kMaxMergedCommands = 4096;

}  // namespace cubed
