#include "storage/sliced_pool.h"

#include <algorithm>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "storage/host_storage.h"

namespace cubed {
namespace {

constexpr uint64_t kAlignment = 64;
constexpr MemoryOwner kOwner = kFirstSessionOwner;
constexpr MemoryOwner kA = kFirstSessionOwner + 1;
constexpr MemoryOwner kB = kFirstSessionOwner + 2;

class SlicedPoolTest : public testing::Test {
 protected:
  // Reserves from free memory, else from a new page.
  void Reserve(SliceId id, uint64_t size, MemoryOwner owner = kOwner) {
    if (!pool_.TryReserve(id, size, owner)) {
      ASSERT_TRUE(pool_.ReserveInNewPage(id, size, owner).ok());
    }
  }
  uint64_t OffsetOf(SliceId id) { return pool_.Locate(id).value().offset; }

  HostStorage storage_;
  SlicedPool pool_{&storage_, 1024, 1024, kAlignment};
};

TEST_F(SlicedPoolTest, PaddingFollowsTheAlignment) {
  Reserve(1, 40);
  Reserve(2, 40);
  const MemoryUsage usage = pool_.Usage();
  EXPECT_EQ(usage.number_allocs, 2u);
  EXPECT_EQ(usage.bytes_in_use, 80u);
  EXPECT_EQ(usage.bytes_padding, 48u);
  EXPECT_EQ(usage.bytes_reserved, 1024u);
  EXPECT_EQ(OffsetOf(1), 0u);
  EXPECT_EQ(OffsetOf(2), 64u);
  EXPECT_EQ(pool_.Locate(1)->storage, pool_.Locate(2)->storage);
}

TEST_F(SlicedPoolTest, FreedNeighboursMergeBackIntoOnePage) {
  Reserve(1, 256);
  Reserve(2, 256);
  Reserve(3, 256);  // [1][2][3][free 256]
  EXPECT_EQ(pool_.free_slice_count(), 1u);
  pool_.Free(1);
  pool_.Free(3);  // Merges with the free tail.
  EXPECT_EQ(pool_.free_slice_count(), 2u);
  EXPECT_EQ(pool_.free_page_bytes(), 0u);
  pool_.Free(2);  // Merges with both neighbours.
  EXPECT_EQ(pool_.free_slice_count(), 1u);
  EXPECT_EQ(pool_.free_page_bytes(), 1024u);
  // The whole page is one slice again.
  EXPECT_TRUE(pool_.TryReserve(4, 1024, kOwner));
  EXPECT_EQ(OffsetOf(4), 0u);
  EXPECT_EQ(pool_.page_count(), 1u);
}

TEST_F(SlicedPoolTest, BestFitTakesTheSmallestHole) {
  Reserve(1, 512);
  Reserve(2, 64);
  Reserve(3, 128);
  Reserve(4, 64);  // [1:512][2:64][3:128][4:64][free 256]
  pool_.Free(3);   // Holes of 128 (offset 576) and 256 (offset 768).
  Reserve(5, 100);
  EXPECT_EQ(OffsetOf(5), 576u);
  Reserve(6, 200);
  EXPECT_EQ(OffsetOf(6), 768u);
  EXPECT_EQ(pool_.page_count(), 1u);
}

TEST_F(SlicedPoolTest, FreedSliceIsReusedBeforeANewPage) {
  Reserve(1, 1000);
  EXPECT_FALSE(pool_.TryReserve(2, 100, kOwner));
  pool_.Free(1);
  EXPECT_TRUE(pool_.TryReserve(2, 100, kOwner));
  EXPECT_EQ(storage_.allocation_count(), 1u);
}

TEST_F(SlicedPoolTest, LargerThanMaxSliceIsRefused) {
  SlicedPool pool(&storage_, 4096, 1024, kAlignment);
  EXPECT_FALSE(pool.TryReserve(1, 1025, kOwner));
  EXPECT_EQ(pool.ReserveInNewPage(1, 1025, kOwner).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(pool.ReserveInNewPage(1, 1024, kOwner).ok());
  EXPECT_EQ(pool.Usage().bytes_reserved, 4096u);
}

TEST_F(SlicedPoolTest, CleanupReturnsOnlyEmptyPages) {
  Reserve(1, 1024);
  Reserve(2, 1024);
  Reserve(3, 512);
  ASSERT_EQ(pool_.page_count(), 3u);
  pool_.Free(1);
  pool_.Free(3);
  EXPECT_EQ(pool_.free_page_bytes(), 2048u);
  pool_.Cleanup();
  EXPECT_EQ(pool_.page_count(), 1u);
  EXPECT_EQ(pool_.Usage().bytes_reserved, 1024u);
  EXPECT_EQ(storage_.bytes_allocated(), 1024u);
  EXPECT_EQ(pool_.free_slice_count(), 0u);
  EXPECT_TRUE(storage_.Resource(pool_.Locate(2)->storage).ok());
}

// Note [Owner-tagged memory] (memory_manager.cc): tags through carve, free and merge.
TEST_F(SlicedPoolTest, CarvingLeavesTheRestWithTheBlocksTag) {
  ASSERT_EQ(pool_.ReserveInNewPage(1, 256, kA).value(), kZeroedOwner);  // [1:A][free 768: zero]
  EXPECT_EQ(pool_.TryReserve(2, 64, kB), kZeroedOwner) << "the rest of a new page is zero";
  pool_.Free(1);                               // [free 256: A][2:B][free 704: zero]
  EXPECT_EQ(pool_.TryReserve(3, 64, kB), kA);  // Best fit: the 256 hole.
  // [3:B][free 192: A][2:B][free 704: zero]: the rest of A's hole is still A's.
  EXPECT_EQ(pool_.TryReserve(4, 100, kB), kA);
  EXPECT_EQ(OffsetOf(4), 64u);
  EXPECT_EQ(pool_.TryReserve(5, 704, kB), kZeroedOwner);
}

TEST_F(SlicedPoolTest, MergingCombinesTags) {
  Reserve(1, 256, kA);
  Reserve(2, 256, kA);
  Reserve(3, 256, kB);  // [1:A][2:A][3:B][free 256: zero]
  pool_.Free(1);
  pool_.Free(2);  // [free 512: A + A = A][3:B][free 256: zero]
  EXPECT_EQ(pool_.TryReserve(4, 512, kA), kA) << "A's own bytes merged stay A's";
  pool_.Free(4);
  Reserve(5, 256, kA);  // Best fit: the zeroed tail. [free 512: A][3:B][5:A]
  pool_.Free(3);        // [free 768: A + B = unknown][5:A]
  EXPECT_EQ(pool_.free_slice_count(), 1u);
  EXPECT_EQ(pool_.TryReserve(6, 768, kA), kUnknownOwner) << "mixed bytes are nobody's";
  // 6 was dirty: zeroed, then A's. Freed, it is A's again, and so is the merged page.
  pool_.Free(6);
  pool_.Free(5);
  EXPECT_EQ(pool_.TryReserve(7, 1024, kB), kA);
}

TEST_F(SlicedPoolTest, OwnBytesNextToZeroedStayOwn) {
  Reserve(1, 100, kA);  // [1:A][free 896: zero]
  pool_.Free(1);        // [free 1024: A + zero = A]
  EXPECT_EQ(pool_.free_slice_count(), 1u);
  EXPECT_EQ(pool_.TryReserve(2, 1024, kA), kA);
  pool_.Free(2);
  EXPECT_EQ(pool_.TryReserve(3, 1024, kB), kA) << "another owner must zero A's bytes";
}

TEST_F(SlicedPoolTest, CleanupForgetsTagsWithThePage) {
  Reserve(1, 1024, kA);
  pool_.Free(1);
  pool_.Cleanup();
  EXPECT_EQ(pool_.page_count(), 0u);
  EXPECT_EQ(pool_.ReserveInNewPage(2, 100, kB).value(), kZeroedOwner);
}

// Random reserve/free against a shadow model: exact usage, no two live slices overlap, every
// slice stays inside its page and keeps its contents.
TEST(SlicedPoolRandomTest, MatchesShadowModelAndNeverOverlaps) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE(seed);
    HostStorage storage;
    SlicedPool pool(&storage, 1 << 16, 1 << 14, kAlignment);
    std::mt19937_64 rng(seed);
    std::map<SliceId, uint64_t> live;  // id -> size
    MemoryUsage want;
    SliceId next_id = 1;
    for (int step = 0; step < 4000; ++step) {
      const bool reserve = live.empty() || rng() % 100 < 55;
      if (reserve) {
        const uint64_t size = 1 + rng() % (rng() % 4 == 0 ? (1 << 14) : 512);
        const SliceId id = next_id++;
        if (!pool.TryReserve(id, size, kOwner)) {
          const uint64_t pages = pool.page_count();
          ASSERT_TRUE(pool.ReserveInNewPage(id, size, kOwner).ok());
          ASSERT_EQ(pool.page_count(), pages + 1);
          want.bytes_reserved += 1 << 16;
        }
        const uint8_t tag = static_cast<uint8_t>(id);
        const SliceLocation location = pool.Locate(id).value();
        uint8_t* base = storage.Resource(location.storage)->host_ptr + location.offset;
        base[0] = tag;
        base[size - 1] = tag;
        live.emplace(id, size);
        want.number_allocs += 1;
        want.bytes_in_use += size;
        want.bytes_padding += (size + kAlignment - 1) / kAlignment * kAlignment - size;
      } else {
        auto it = live.begin();
        std::advance(it, rng() % live.size());
        ASSERT_TRUE(pool.Free(it->first));
        want.number_allocs -= 1;
        want.bytes_in_use -= it->second;
        want.bytes_padding -= (it->second + kAlignment - 1) / kAlignment * kAlignment - it->second;
        live.erase(it);
      }
      if (step % 500 == 499) {
        want.bytes_reserved -= pool.free_page_bytes();
        pool.Cleanup();
      }
      const MemoryUsage got = pool.Usage();
      ASSERT_EQ(got.number_allocs, want.number_allocs);
      ASSERT_EQ(got.bytes_in_use, want.bytes_in_use);
      ASSERT_EQ(got.bytes_padding, want.bytes_padding);
      ASSERT_EQ(got.bytes_reserved, want.bytes_reserved);
      ASSERT_EQ(storage.bytes_allocated(), want.bytes_reserved);
      if (step % 50 != 0) continue;
      std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
      for (const auto& [id, size] : live) {
        const SliceLocation location = pool.Locate(id).value();
        ASSERT_EQ(location.offset % kAlignment, 0u);
        ASSERT_EQ(location.size, size);
        const StorageResource page = storage.Resource(location.storage).value();
        ASSERT_LE(location.offset + size, page.size);
        const uint8_t* base = page.host_ptr + location.offset;
        ASSERT_EQ(base[0], static_cast<uint8_t>(id));
        ASSERT_EQ(base[size - 1], static_cast<uint8_t>(id));
        ranges.emplace_back(reinterpret_cast<uintptr_t>(base),
                            reinterpret_cast<uintptr_t>(base) + size);
      }
      std::sort(ranges.begin(), ranges.end());
      for (size_t i = 1; i < ranges.size(); ++i) ASSERT_LE(ranges[i - 1].second, ranges[i].first);
    }
    for (const auto& [id, size] : live) ASSERT_TRUE(pool.Free(id));
    pool.Cleanup();
    EXPECT_EQ(pool.Usage().bytes_reserved, 0u);
    EXPECT_EQ(pool.free_slice_count(), 0u);
    EXPECT_EQ(storage.allocation_count(), 0u);
  }
}

}  // namespace
}  // namespace cubed
