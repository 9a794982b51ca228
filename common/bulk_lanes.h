#pragma once

// Lanes of a bulk transfer (Note [Bulk lanes], server/service/stream/bulk_transfers.h): one
// Upload or Download RPC each, on a connection of its own, that together move the bytes of one
// bulk command. What the client and the daemon must agree on: how an upload's bytes are split.

#include <cstdint>

#include "absl/status/statusor.h"

namespace cubed {

// Most lanes one bulk command may have.
inline constexpr uint32_t kMaxBulkLanes = 16;
// Lanes of an upload start at multiples of this many bytes.
inline constexpr uint64_t kBulkLaneAlign = uint64_t{64} << 10;

// The bytes [begin, end) of an upload that lane `lane` of `lanes` carries: the `total` bytes cut
// into `lanes` parts of ceil(total / lanes) rounded up to kBulkLaneAlign, the last part taking
// what is left. `lanes` 0 means 1. INVALID_ARGUMENT naming the field when `lanes` is above
// kMaxBulkLanes, `lane` is not below it, or the split leaves a lane without bytes (too many
// lanes for `total`). Pure.
struct BulkLaneRange {
  uint64_t begin = 0;
  uint64_t end = 0;
};
absl::StatusOr<BulkLaneRange> UploadLaneRange(uint64_t total, uint32_t lanes, uint32_t lane);

// How many lanes a client uses for `bytes`: at most `max_lanes` (1 .. kMaxBulkLanes; 0 = 1), and
// no more than leave every lane at least `min_lane_bytes` (0 = no minimum); always a count
// UploadLaneRange accepts for `bytes` (>= 1). Pure.
uint32_t ChooseBulkLanes(uint64_t bytes, uint32_t max_lanes, uint64_t min_lane_bytes);

}  // namespace cubed
