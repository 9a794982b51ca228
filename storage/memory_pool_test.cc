// Conformance suite for MemoryPool, instantiated for SlicedPool and ExclusivePool.

#include "storage/memory_pool.h"

#include <functional>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "storage/exclusive_pool.h"
#include "storage/host_storage.h"
#include "storage/sliced_pool.h"

namespace cubed {
namespace {

constexpr uint64_t kAlignment = 64;
constexpr uint64_t kPageSize = 1 << 16;
constexpr MemoryOwner kOwner = kFirstSessionOwner;
constexpr MemoryOwner kOther = kFirstSessionOwner + 1;

// A HostStorage that promises nothing about new allocations, as CudaStorage.
class UnzeroedStorage final : public ComputeStorage {
 public:
  uint64_t alignment() const override { return host_.alignment(); }
  absl::StatusOr<StorageId> Alloc(uint64_t size) override { return host_.Alloc(size); }
  void Dealloc(StorageId id) override { host_.Dealloc(id); }
  absl::StatusOr<StorageResource> Resource(StorageId id) const override {
    return host_.Resource(id);
  }

 private:
  HostStorage host_;
};

struct PoolFactory {
  std::string name;
  std::function<std::unique_ptr<MemoryPool>(ComputeStorage*)> make;
};

class MemoryPoolConformance : public testing::TestWithParam<PoolFactory> {
 protected:
  void SetUp() override { pool_ = GetParam().make(&storage_); }
  void TearDown() override {
    pool_.reset();
    EXPECT_EQ(storage_.allocation_count(), 0u) << "the pool's destructor leaked pages";
  }

  HostStorage storage_;
  std::unique_ptr<MemoryPool> pool_;
};

MemoryUsage UsageOf(uint64_t allocs, uint64_t in_use, uint64_t padding, uint64_t reserved) {
  MemoryUsage usage;
  usage.number_allocs = allocs;
  usage.bytes_in_use = in_use;
  usage.bytes_padding = padding;
  usage.bytes_reserved = reserved;
  return usage;
}

void ExpectUsage(const MemoryUsage& got, const MemoryUsage& want) {
  EXPECT_EQ(got.number_allocs, want.number_allocs);
  EXPECT_EQ(got.bytes_in_use, want.bytes_in_use);
  EXPECT_EQ(got.bytes_padding, want.bytes_padding);
  EXPECT_EQ(got.bytes_reserved, want.bytes_reserved);
}

TEST_P(MemoryPoolConformance, EmptyPoolHasNothingToReuse) {
  EXPECT_FALSE(pool_->TryReserve(1, 100, kOwner));
  ExpectUsage(pool_->Usage(), MemoryUsage{});
  EXPECT_EQ(pool_->free_page_bytes(), 0u);
  EXPECT_FALSE(pool_->Locate(1).has_value());
}

TEST_P(MemoryPoolConformance, NewPageSliceIsLocatedInsideItsPage) {
  ASSERT_TRUE(pool_->ReserveInNewPage(7, 1000, kOwner).ok());
  std::optional<SliceLocation> location = pool_->Locate(7);
  ASSERT_TRUE(location.has_value());
  EXPECT_EQ(location->size, 1000u);
  EXPECT_EQ(location->offset % kAlignment, 0u);
  absl::StatusOr<StorageResource> page = storage_.Resource(location->storage);
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(page->size, pool_->NewPageSize(1000));
  EXPECT_LE(location->offset + location->size, page->size);
  ExpectUsage(pool_->Usage(), UsageOf(1, 1000, 24, pool_->NewPageSize(1000)));
}

TEST_P(MemoryPoolConformance, FreeOfUnknownOrFreedSliceIsFalse) {
  ASSERT_TRUE(pool_->ReserveInNewPage(1, 100, kOwner).ok());
  const MemoryUsage before = pool_->Usage();
  EXPECT_FALSE(pool_->Free(2));
  ExpectUsage(pool_->Usage(), before);
  EXPECT_TRUE(pool_->Free(1));
  EXPECT_FALSE(pool_->Free(1));
  EXPECT_FALSE(pool_->Locate(1).has_value());
}

TEST_P(MemoryPoolConformance, FreedMemoryIsReusedWithoutStorage) {
  ASSERT_TRUE(pool_->ReserveInNewPage(1, 4096, kOwner).ok());
  const uint64_t reserved = pool_->Usage().bytes_reserved;
  EXPECT_TRUE(pool_->Free(1));
  EXPECT_EQ(pool_->free_page_bytes(), reserved);
  ExpectUsage(pool_->Usage(), UsageOf(0, 0, 0, reserved));
  EXPECT_TRUE(pool_->TryReserve(2, 4033, kOwner));
  EXPECT_EQ(storage_.allocation_count(), 1u);
  EXPECT_EQ(pool_->free_page_bytes(), 0u);
  ExpectUsage(pool_->Usage(), UsageOf(1, 4033, 63, reserved));
}

TEST_P(MemoryPoolConformance, CleanupReturnsFreePagesOnly) {
  ASSERT_TRUE(pool_->ReserveInNewPage(1, 100, kOwner).ok());
  ASSERT_TRUE(pool_->ReserveInNewPage(2, 100, kOwner).ok());
  ASSERT_EQ(storage_.allocation_count(), 2u);
  const uint64_t page = pool_->NewPageSize(100);
  EXPECT_TRUE(pool_->Free(1));
  pool_->Cleanup();
  EXPECT_EQ(storage_.allocation_count(), 1u);
  ExpectUsage(pool_->Usage(), UsageOf(1, 100, 28, page));
  ASSERT_TRUE(pool_->Locate(2).has_value());
  EXPECT_TRUE(storage_.Resource(pool_->Locate(2)->storage).ok());
  EXPECT_TRUE(pool_->Free(2));
  pool_->Cleanup();
  EXPECT_EQ(storage_.allocation_count(), 0u);
  ExpectUsage(pool_->Usage(), MemoryUsage{});
  EXPECT_EQ(pool_->free_page_bytes(), 0u);
}

TEST_P(MemoryPoolConformance, StorageRefusalChangesNothing) {
  HostStorageOptions options;
  options.capacity = 100;  // Smaller than any page.
  HostStorage small(options);
  std::unique_ptr<MemoryPool> pool = GetParam().make(&small);
  absl::Status status = pool->ReserveInNewPage(1, 1000, kOwner).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  ExpectUsage(pool->Usage(), MemoryUsage{});
  EXPECT_FALSE(pool->Locate(1).has_value());
  EXPECT_EQ(small.allocation_count(), 0u);
}

TEST_P(MemoryPoolConformance, OutOfRangeSizesAreRefused) {
  EXPECT_FALSE(pool_->TryReserve(1, 0, kOwner));
  EXPECT_EQ(pool_->ReserveInNewPage(1, 0, kOwner).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(storage_.allocation_count(), 0u);
}

// Note [Owner-tagged memory] (memory_manager.cc), for both pools.
TEST_P(MemoryPoolConformance, NewPageIsZeroedWhenTheStorageZeroesElseUnknown) {
  absl::StatusOr<MemoryOwner> tag = pool_->ReserveInNewPage(1, 1000, kOwner);
  ASSERT_TRUE(tag.ok()) << tag.status();
  EXPECT_EQ(*tag, kZeroedOwner);
  UnzeroedStorage unzeroed;
  std::unique_ptr<MemoryPool> pool = GetParam().make(&unzeroed);
  tag = pool->ReserveInNewPage(1, 1000, kOwner);
  ASSERT_TRUE(tag.ok()) << tag.status();
  EXPECT_EQ(*tag, kUnknownOwner);
}

TEST_P(MemoryPoolConformance, FreedMemoryKeepsItsOwnersTag) {
  // A whole page, so that no free rest merges with the freed slice.
  ASSERT_TRUE(pool_->ReserveInNewPage(1, kPageSize, kOwner).ok());
  EXPECT_TRUE(pool_->Free(1));
  EXPECT_EQ(pool_->TryReserve(2, kPageSize, kOther), kOwner)
      << "another owner gets the owner's bytes";
  EXPECT_TRUE(pool_->Free(2));
  EXPECT_EQ(pool_->TryReserve(3, kPageSize, kOther), kOther) << "its own bytes, tagged as such";
  EXPECT_TRUE(pool_->Free(3));
  pool_->Cleanup();
  EXPECT_EQ(pool_->ReserveInNewPage(4, kPageSize, kOwner).value(), kZeroedOwner)
      << "a page after Cleanup is a fresh one";
}

TEST_P(MemoryPoolConformance, ForgottenOwnerLeavesUnknownMemory) {
  ASSERT_TRUE(pool_->ReserveInNewPage(1, kPageSize, kOwner).ok());
  EXPECT_TRUE(pool_->ForgetOwner(1));
  EXPECT_FALSE(pool_->ForgetOwner(2));
  EXPECT_TRUE(pool_->Free(1));
  EXPECT_EQ(pool_->TryReserve(3, kPageSize, kOwner), kUnknownOwner);
}

TEST_P(MemoryPoolConformance, ExtentCoversTheRoundedSize) {
  ASSERT_TRUE(pool_->ReserveInNewPage(1, 1000, kOwner).ok());
  std::optional<SliceLocation> location = pool_->Locate(1);
  ASSERT_TRUE(location.has_value());
  EXPECT_EQ(location->size, 1000u);
  EXPECT_EQ(location->extent, 1024u);
}

INSTANTIATE_TEST_SUITE_P(
    Pools, MemoryPoolConformance,
    testing::Values(PoolFactory{"Sliced",
                                [](ComputeStorage* storage) -> std::unique_ptr<MemoryPool> {
                                  return std::make_unique<SlicedPool>(storage, kPageSize, kPageSize,
                                                                      kAlignment);
                                }},
                    PoolFactory{"Exclusive",
                                [](ComputeStorage* storage) -> std::unique_ptr<MemoryPool> {
                                  return std::make_unique<ExclusivePool>(storage, kAlignment);
                                }}),
    [](const testing::TestParamInfo<PoolFactory>& info) { return info.param.name; });

}  // namespace
}  // namespace cubed
