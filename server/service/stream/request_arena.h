#pragma once

// Note [Request arena]: a parsed SessionRequest's messages (a dozen per execute) live on an
// arena, freed at once when the request was converted instead of one by one; conversion moved
// out what commands keep. The arena's first block is memory of the stream's own, kept across
// resets and grown to what the largest request took (at most kMaxFirstBlockBytes): with the
// arena's own blocks (8 KiB growing to 64 KiB) a merged ring read of 256 executes (~164 KB
// parsed) malloc'd and freed four blocks, faulting their pages in again, on every read (the
// ring thread's malloc, free and page faults were ~4% of P2's CPU on the 2-core VM).

#include <cstddef>
#include <memory>

#include "cubed/v1/session.pb.h"
#include "google/protobuf/arena.h"

namespace cubed {

// One SessionRequest at a time on an arena that is reused. Not thread-safe: one owner (the
// stream, between reads).
class RequestArena {
 public:
  static constexpr size_t kMaxFirstBlockBytes = size_t{256} << 10;

  RequestArena();
  RequestArena(const RequestArena&) = delete;
  RequestArena& operator=(const RequestArena&) = delete;

  // The message to parse into; valid until the next Reset.
  v1::SessionRequest* request() const { return request_; }

  // Frees the request (and everything parsed into it) and gives a fresh empty one; grows the
  // first block first when the request outgrew it.
  void Reset();

  size_t first_block_bytes() const { return first_block_bytes_; }

 private:
  void Make();

  size_t first_block_bytes_ = 0;
  std::unique_ptr<char[]> first_block_;  // Declared before arena_: outlives it.
  std::unique_ptr<google::protobuf::Arena> arena_;
  v1::SessionRequest* request_ = nullptr;
};

}  // namespace cubed
