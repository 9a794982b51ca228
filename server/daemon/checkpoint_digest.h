#pragma once

// DigestThread: SHA-256 (common/crypto/sha256.h) of byte strings handed over in pieces, computed
// on a thread of its own beside the caller's file I/O (Note [Checkpoint I/O],
// server/channel/device.h).

#include <cstdint>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace cubed {

// Add and Wait are called by one thread at a time (the owner's); the digest thread touches only
// the queue and the results, under the mutex.
class DigestThread {
 public:
  DigestThread();
  // Hashes what is queued, then joins the thread.
  ~DigestThread();

  DigestThread(const DigestThread&) = delete;
  DigestThread& operator=(const DigestThread&) = delete;

  // Queues `bytes` as the next piece of the current string: `first` starts a new string, `last`
  // ends it. The bytes must stay unchanged until the next Wait returns.
  void Add(absl::Span<const uint8_t> bytes, bool first, bool last);
  // Waits until every queued piece is hashed; returns the digests (32 bytes each) of the strings
  // ended since the last Wait, in order. INTERNAL when libcrypto failed.
  absl::StatusOr<std::vector<std::string>> Wait();

 private:
  struct Piece {
    absl::Span<const uint8_t> bytes;
    bool first = false;
    bool last = false;
  };
  void Run();

  absl::Mutex mu_;
  std::deque<Piece> queue_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;  // A piece is being hashed.
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::string> done_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace cubed
