#include "storage/exclusive_pool.h"

#include "gtest/gtest.h"
#include "storage/host_storage.h"

namespace cubed {
namespace {

constexpr MemoryOwner kOwner = kFirstSessionOwner;
constexpr MemoryOwner kOther = kFirstSessionOwner + 1;

class ExclusivePoolTest : public testing::Test {
 protected:
  HostStorage storage_;
  ExclusivePool pool_{&storage_, 64};
};

TEST_F(ExclusivePoolTest, PageIsTheRequestRoundedToTheAlignment) {
  ASSERT_TRUE(pool_.ReserveInNewPage(1, 1000, kOwner).ok());
  ASSERT_TRUE(pool_.ReserveInNewPage(2, (uint64_t{100} << 20) + 3, kOwner).ok());
  const MemoryUsage usage = pool_.Usage();
  EXPECT_EQ(usage.bytes_reserved, 1024u + (uint64_t{100} << 20) + 64);
  EXPECT_EQ(usage.bytes_padding, 24u + 61);
  EXPECT_EQ(pool_.Locate(2)->offset, 0u);
  EXPECT_NE(pool_.Locate(1)->storage, pool_.Locate(2)->storage);
}

TEST_F(ExclusivePoolTest, FreePageIsReusedOnlyWithinOneEighthWaste) {
  ASSERT_TRUE(pool_.ReserveInNewPage(1, 1024, kOwner).ok());
  pool_.Free(1);
  EXPECT_FALSE(pool_.TryReserve(2, 1025, kOwner));  // Does not fit.
  EXPECT_FALSE(pool_.TryReserve(2, 896, kOwner));   // Would waste 128 > 896 / 8.
  EXPECT_TRUE(pool_.TryReserve(2, 897, kOwner));    // Rounded 960; wastes 64 <= 120.
  EXPECT_EQ(pool_.Usage().bytes_padding, 1024u - 897);
  EXPECT_EQ(storage_.allocation_count(), 1u);
}

TEST_F(ExclusivePoolTest, SmallestFittingFreePageIsChosen) {
  ASSERT_TRUE(pool_.ReserveInNewPage(1, 1100, kOwner).ok());
  ASSERT_TRUE(pool_.ReserveInNewPage(2, 1024, kOwner).ok());
  ASSERT_TRUE(pool_.ReserveInNewPage(3, 1050, kOwner).ok());
  const StorageId page2 = pool_.Locate(2)->storage;
  pool_.Free(1);
  pool_.Free(2);
  pool_.Free(3);
  EXPECT_TRUE(pool_.TryReserve(4, 1000, kOwner));
  EXPECT_EQ(pool_.Locate(4)->storage, page2);
  EXPECT_EQ(pool_.free_page_count(), 2u);
}

TEST_F(ExclusivePoolTest, CleanupReturnsFreePagesOnly) {
  ASSERT_TRUE(pool_.ReserveInNewPage(1, 4096, kOwner).ok());
  ASSERT_TRUE(pool_.ReserveInNewPage(2, 8192, kOwner).ok());
  pool_.Free(2);
  EXPECT_EQ(pool_.free_page_bytes(), 8192u);
  pool_.Cleanup();
  EXPECT_EQ(pool_.page_count(), 1u);
  EXPECT_EQ(pool_.Usage().bytes_reserved, 4096u);
  EXPECT_EQ(storage_.bytes_allocated(), 4096u);
  EXPECT_EQ(pool_.free_page_bytes(), 0u);
  EXPECT_FALSE(pool_.TryReserve(3, 8192, kOwner));
}

// Note [Owner-tagged memory] (memory_manager.cc): a reused page is the whole page, tag and extent.
TEST_F(ExclusivePoolTest, ReusedPageKeepsItsTagOverItsWholeSize) {
  ASSERT_EQ(pool_.ReserveInNewPage(1, 1024, kOwner).value(), kZeroedOwner);
  pool_.Free(1);
  EXPECT_EQ(pool_.TryReserve(2, 897, kOther), kOwner);
  EXPECT_EQ(pool_.Locate(2)->extent, 1024u) << "the waste past the request holds old bytes too";
  pool_.Free(2);
  EXPECT_EQ(pool_.TryReserve(3, 1000, kOther), kOther);
  pool_.Free(3);
  ASSERT_EQ(pool_.ReserveInNewPage(4, 4096, kOwner).value(), kZeroedOwner);
  EXPECT_EQ(pool_.TryReserve(5, 1024, kOwner), kOther) << "each page keeps its own tag";
}

}  // namespace
}  // namespace cubed
