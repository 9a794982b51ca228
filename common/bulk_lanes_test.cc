#include "common/bulk_lanes.h"

#include <cstdint>
#include <limits>

#include "gtest/gtest.h"

namespace cubed {
namespace {

// The lanes of `total` cover [0, total) in order, without gaps or overlaps, each non-empty.
void ExpectCover(uint64_t total, uint32_t lanes) {
  uint64_t next = 0;
  for (uint32_t lane = 0; lane < lanes; ++lane) {
    absl::StatusOr<BulkLaneRange> r = UploadLaneRange(total, lanes, lane);
    ASSERT_TRUE(r.ok()) << total << " " << lanes << " " << lane << ": " << r.status();
    EXPECT_EQ(r->begin, next);
    EXPECT_LT(r->begin, r->end);
    if (lane > 0) {
      EXPECT_EQ(r->begin % kBulkLaneAlign, 0u);
    }
    next = r->end;
  }
  EXPECT_EQ(next, total);
}

TEST(BulkLaneRangeTest, LanesCoverEveryByteOnce) {
  ExpectCover(1, 1);
  ExpectCover(256ull << 20, 4);
  ExpectCover((256ull << 20) + 1, 4);
  ExpectCover((256ull << 20) - 1, 3);
  ExpectCover(3 * kBulkLaneAlign + 1, 4);
  ExpectCover(16 * kBulkLaneAlign, 16);
  ExpectCover(std::numeric_limits<uint64_t>::max(), 16);
}

TEST(BulkLaneRangeTest, ZeroLanesIsOne) {
  absl::StatusOr<BulkLaneRange> r = UploadLaneRange(100, 0, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->begin, 0u);
  EXPECT_EQ(r->end, 100u);
}

TEST(BulkLaneRangeTest, BadLanesAreNamed) {
  EXPECT_NE(UploadLaneRange(1 << 30, 17, 0).status().message().find("lanes: 17"),
            std::string::npos);
  EXPECT_NE(UploadLaneRange(1 << 30, 4, 4).status().message().find("lane: lane 4 of 4"),
            std::string::npos);
  // 100 bytes in two lanes: the second would start at 64 KiB.
  EXPECT_NE(UploadLaneRange(100, 2, 1).status().message().find("without bytes"), std::string::npos);
}

TEST(BulkLaneRangeTest, ChosenLanesAlwaysFit) {
  EXPECT_EQ(ChooseBulkLanes(256ull << 20, 4, 16ull << 20), 4u);
  EXPECT_EQ(ChooseBulkLanes(40ull << 20, 4, 16ull << 20), 2u);
  EXPECT_EQ(ChooseBulkLanes(10ull << 20, 4, 16ull << 20), 1u);
  EXPECT_EQ(ChooseBulkLanes(256ull << 20, 0, 0), 1u);
  EXPECT_EQ(ChooseBulkLanes(256ull << 20, 99, 0), kMaxBulkLanes);
  for (uint64_t bytes :
       {uint64_t{1}, uint64_t{100}, uint64_t{65537}, 3 * kBulkLaneAlign + 1, uint64_t{1} << 20}) {
    const uint32_t lanes = ChooseBulkLanes(bytes, 16, 0);
    EXPECT_GE(lanes, 1u);
    EXPECT_TRUE(UploadLaneRange(bytes, lanes, lanes - 1).ok()) << bytes << " " << lanes;
  }
}

}  // namespace
}  // namespace cubed
