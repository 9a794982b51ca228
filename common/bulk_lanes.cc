#include "common/bulk_lanes.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/checked_math.h"

namespace cubed {

absl::StatusOr<BulkLaneRange> UploadLaneRange(uint64_t total, uint32_t lanes, uint32_t lane) {
  if (lanes == 0) lanes = 1;
  if (lanes > kMaxBulkLanes) {
    return absl::InvalidArgumentError(
        absl::StrCat("lanes: ", lanes, " lanes; a bulk transfer has 1 .. ", kMaxBulkLanes));
  }
  if (lane >= lanes) {
    return absl::InvalidArgumentError(
        absl::StrCat("lane: lane ", lane, " of ", lanes, " lanes (lanes count from 0)"));
  }
  if (lanes == 1) return BulkLaneRange{0, total};
  const uint64_t part = total / lanes + (total % lanes != 0 ? 1 : 0);
  // part <= total / 2 + 1, so neither the round-up nor lane * stride (lane < 16) can wrap unless
  // total is within 16 * 64 KiB of 2^64; checked all the same.
  const std::optional<uint64_t> stride = CheckedRoundUp(part, kBulkLaneAlign);
  const std::optional<uint64_t> begin =
      stride.has_value() ? CheckedMul(*stride, lane) : std::nullopt;
  if (!begin.has_value() || *begin >= total) {
    return absl::InvalidArgumentError(
        absl::StrCat("lanes: ", lanes, " lanes for ", total, " bytes leave lane ", lane,
                     " without bytes (lanes start every ", kBulkLaneAlign, " bytes at the least)"));
  }
  const uint64_t end = total - *begin > *stride ? *begin + *stride : total;
  return BulkLaneRange{*begin, end};
}

uint32_t ChooseBulkLanes(uint64_t bytes, uint32_t max_lanes, uint64_t min_lane_bytes) {
  uint32_t lanes = std::clamp<uint32_t>(max_lanes, 1, kMaxBulkLanes);
  if (min_lane_bytes > 0) {
    lanes = static_cast<uint32_t>(
        std::min<uint64_t>(lanes, std::max<uint64_t>(1, bytes / min_lane_bytes)));
  }
  while (lanes > 1 && !UploadLaneRange(bytes, lanes, lanes - 1).ok()) --lanes;
  return lanes;
}

}  // namespace cubed
