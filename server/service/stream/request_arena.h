#pragma once

// Note [Request arena]: the messages protobuf parses from a SessionRequest (a dozen per execute;
// only the commands the fast decoder declines since Note [Fast execute decode], execute_decoder.h)
// live on an arena, freed at once when the request was converted instead of one by one;
// conversion moved out what commands keep. The arena's first block is memory of the stream's own,
// kept across resets and grown to what the largest request took (at most kMaxFirstBlockBytes): with
// the arena's own blocks (8 KiB growing to 64 KiB) a merged ring read of 256 executes (~164 KB
// parsed) malloc'd and freed four blocks, faulting their pages in again, on every read (the
// ring thread's malloc, free and page faults were ~4% of P2's CPU on the 2-core VM).

#include <cstddef>
#include <memory>

#include "google/protobuf/arena.h"

namespace cubed {

// The messages of one request at a time on an arena that is reused. Not thread-safe: one owner
// (the stream's decoder, between reads).
class RequestArena {
 public:
  static constexpr size_t kMaxFirstBlockBytes = size_t{256} << 10;

  RequestArena();
  RequestArena(const RequestArena&) = delete;
  RequestArena& operator=(const RequestArena&) = delete;

  // A new empty message on the arena to parse into; valid until the next Reset.
  template <typename Message>
  Message* Create() {
    return google::protobuf::Arena::CreateMessage<Message>(arena_.get());
  }

  // Frees every message created since the last Reset (and everything parsed into them); grows
  // the first block first when they outgrew it.
  void Reset();

  size_t first_block_bytes() const { return first_block_bytes_; }

 private:
  void Make();

  size_t first_block_bytes_ = 0;
  std::unique_ptr<char[]> first_block_;  // Declared before arena_: outlives it.
  std::unique_ptr<google::protobuf::Arena> arena_;
};

}  // namespace cubed
