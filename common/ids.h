#pragma once

// Strong ids: the wire's opaque 64-bit session and handle ids as two distinct types, so that one
// cannot be passed where the other belongs (a session id for a handle, a size for either).
// Construction from and access to the number are explicit: SessionId(wire), id.value(). The
// edge converts; everything below it passes ids by type.

#include <cstdint>
#include <utility>

namespace cubed {

template <typename Tag>
class StrongId {
 public:
  constexpr StrongId() = default;
  constexpr explicit StrongId(uint64_t value) : value_(value) {}
  constexpr uint64_t value() const { return value_; }

  friend constexpr bool operator==(StrongId a, StrongId b) { return a.value_ == b.value_; }
  friend constexpr bool operator!=(StrongId a, StrongId b) { return a.value_ != b.value_; }
  friend constexpr bool operator<(StrongId a, StrongId b) { return a.value_ < b.value_; }
  template <typename H>
  friend H AbslHashValue(H h, StrongId id) {
    return H::combine(std::move(h), id.value_);
  }

 private:
  uint64_t value_ = 0;
};

// A session: random, unguessable, the device index in its low byte (DeviceOfSession).
using SessionId = StrongId<struct SessionIdTag>;
// A handle of one session: the daemon's (top bit clear) or the client's (top bit set).
using HandleId = StrongId<struct HandleIdTag>;
// A shared-memory region of one session (Note [Shared-memory regions],
// server/channel/shared_region.h): never 0, not sequential.
using RegionId = StrongId<struct RegionIdTag>;
// A recorded graph of one session (Note [Recorded graphs], server/channel/graph.h): chosen by the
// client, never 0.
using GraphId = StrongId<struct GraphIdTag>;

}  // namespace cubed
