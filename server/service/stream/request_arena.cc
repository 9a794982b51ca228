#include "server/service/stream/request_arena.h"

#include <algorithm>

#include "absl/numeric/bits.h"

namespace cubed {

RequestArena::RequestArena() { Make(); }

void RequestArena::Make() {
  google::protobuf::ArenaOptions options;
  options.start_block_size = 8 << 10;
  options.max_block_size = 64 << 10;
  if (first_block_ != nullptr) {
    options.initial_block = first_block_.get();
    options.initial_block_size = first_block_bytes_;
  }
  arena_ = std::make_unique<google::protobuf::Arena>(options);
}

void RequestArena::Reset() {
  const size_t allocated = static_cast<size_t>(arena_->SpaceAllocated());
  if (allocated > first_block_bytes_ && first_block_bytes_ < kMaxFirstBlockBytes) {
    arena_.reset();  // Before its first block goes.
    first_block_bytes_ = std::min(kMaxFirstBlockBytes, absl::bit_ceil(allocated));
    first_block_.reset(new char[first_block_bytes_]);  // Uninitialized: the arena writes first.
    Make();
    return;
  }
  arena_->Reset();
}

}  // namespace cubed
