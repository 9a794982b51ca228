#include "client/handle_state.h"

namespace cubed {

uint64_t Handle::id() const { return state_ ? state_->id : 0; }

uint64_t Handle::size() const { return state_ ? state_->size : 0; }

uint64_t Handle::Detach() {
  if (!state_) return 0;
  state_->detached.store(true, std::memory_order_release);
  return state_->id;
}

uint64_t Tensor::NumElements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

}  // namespace cubed
