#include "storage/memory_manager.h"

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/host_storage.h"

namespace cubed {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kMiB = uint64_t{1} << 20;

uint64_t RoundUp(uint64_t size, uint64_t alignment) {
  return (size + alignment - 1) / alignment * alignment;
}

MemoryManagerOptions WithLimit(uint64_t limit) {
  MemoryManagerOptions options;
  options.memory_limit = limit;
  return options;
}

#define EXPECT_USAGE(manager, allocs, in_use, padding, reserved) \
  do {                                                           \
    const MemoryUsage got_ = (manager).Usage();                  \
    EXPECT_EQ(got_.number_allocs, uint64_t{allocs});             \
    EXPECT_EQ(got_.bytes_in_use, uint64_t{in_use});              \
    EXPECT_EQ(got_.bytes_padding, uint64_t{padding});            \
    EXPECT_EQ(got_.bytes_reserved, uint64_t{reserved});          \
  } while (false)

class MemoryManagerTest : public testing::Test {
 protected:
  SliceId MustReserve(MemoryManager& manager, uint64_t size) {
    absl::StatusOr<SliceId> id = manager.Reserve(size);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.value_or(0);
  }

  HostStorage storage_;
};

TEST_F(MemoryManagerTest, ZeroIsInvalidArgumentAndTooLargeIsResourceExhausted) {
  MemoryManagerOptions options;
  options.max_allocation = 1000;
  MemoryManager manager(&storage_, options);
  absl::StatusOr<SliceId> zero = manager.Reserve(0);
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(zero.status().message(), HasSubstr("0 bytes"));
  absl::StatusOr<SliceId> big = manager.Reserve(1001);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(big.status().message(), HasSubstr("1001"));
  EXPECT_THAT(big.status().message(), HasSubstr("max_allocation (1000 bytes)"));
  EXPECT_TRUE(manager.Reserve(1000).ok());
}

TEST_F(MemoryManagerTest, ReserveLocateFree) {
  MemoryManager manager(&storage_, {});
  EXPECT_EQ(manager.alignment(), 64u);
  const SliceId a = MustReserve(manager, 100);
  const SliceId b = MustReserve(manager, 100);
  EXPECT_NE(a, b);
  absl::StatusOr<SliceLocation> la = manager.Locate(a);
  absl::StatusOr<SliceLocation> lb = manager.Locate(b);
  ASSERT_TRUE(la.ok() && lb.ok());
  EXPECT_EQ(la->size, 100u);
  EXPECT_EQ(la->offset % 64, 0u);
  absl::StatusOr<StorageResource> page = storage_.Resource(la->storage);
  ASSERT_TRUE(page.ok());
  std::fill_n(page->host_ptr + la->offset, 100, 0x11);  // Writable, in bounds (ASan).
  EXPECT_TRUE(la->storage != lb->storage || la->offset + 100 <= lb->offset ||
              lb->offset + 100 <= la->offset);
  manager.Free(a);
  EXPECT_EQ(manager.Locate(a).status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(manager.Locate(a).status().message(), HasSubstr("unknown slice id"));
  EXPECT_TRUE(manager.Locate(b).ok());
}

TEST_F(MemoryManagerTest, UsageIsExactAfterEachStep) {
  MemoryManager manager(&storage_, {});
  EXPECT_USAGE(manager, 0, 0, 0, 0);
  const SliceId a = MustReserve(manager, 40);
  EXPECT_USAGE(manager, 1, 40, 24, 8 * kMiB);
  const SliceId b = MustReserve(manager, 40);
  EXPECT_USAGE(manager, 2, 80, 48, 8 * kMiB);
  const SliceId c = MustReserve(manager, 2 * kMiB + 1);  // Medium: a 64 MiB page.
  EXPECT_USAGE(manager, 3, 80 + 2 * kMiB + 1, 48 + 63, 72 * kMiB);
  const SliceId d = MustReserve(manager, 20 * kMiB);  // Large: an exclusive page.
  EXPECT_USAGE(manager, 4, 80 + 22 * kMiB + 1, 48 + 63, 92 * kMiB);
  manager.Free(a);
  EXPECT_USAGE(manager, 3, 40 + 22 * kMiB + 1, 24 + 63, 92 * kMiB);
  manager.Free(c);
  manager.Free(d);
  EXPECT_USAGE(manager, 1, 40, 24, 92 * kMiB);
  manager.Free(b);
  EXPECT_USAGE(manager, 0, 0, 0, 92 * kMiB);
  manager.Cleanup();
  EXPECT_USAGE(manager, 0, 0, 0, 0);
  EXPECT_EQ(storage_.allocation_count(), 0u);
}

TEST_F(MemoryManagerTest, FreeOfUnknownIdIsIgnored) {
  MemoryManager manager(&storage_, {});
  const SliceId a = MustReserve(manager, 4096);
  const MemoryUsage before = manager.Usage();
  manager.Free(a + 100);
  manager.Free(a);
  manager.Free(a);  // Double free: also unknown now.
  EXPECT_USAGE(manager, 0, 0, 0, before.bytes_reserved);
}

TEST_F(MemoryManagerTest, FreedSlicesAreMergedAndReused) {
  MemoryManager manager(&storage_, {});
  std::vector<SliceId> ids;
  for (int i = 0; i < 8; ++i) ids.push_back(MustReserve(manager, kMiB));  // Fills a page.
  EXPECT_EQ(storage_.allocation_count(), 1u);
  for (SliceId id : ids) manager.Free(id);
  // Only a merged free page can hold 1 MiB + 512 KiB without a new page.
  const SliceId big = MustReserve(manager, kMiB);
  const SliceId next = MustReserve(manager, kMiB / 2);
  EXPECT_EQ(storage_.allocation_count(), 1u);
  EXPECT_EQ(manager.Locate(big)->storage, manager.Locate(next)->storage);
}

TEST_F(MemoryManagerTest, LadderPicksPageSizeByRequest) {
  MemoryManager manager(&storage_, {});
  MustReserve(manager, kMiB);
  EXPECT_EQ(manager.Usage().bytes_reserved, 8 * kMiB);
  MustReserve(manager, kMiB + 1);
  EXPECT_EQ(manager.Usage().bytes_reserved, 72 * kMiB);
  MustReserve(manager, 16 * kMiB);
  EXPECT_EQ(manager.Usage().bytes_reserved, 72 * kMiB);  // Fits the medium page.
  MustReserve(manager, 16 * kMiB + 1);
  EXPECT_EQ(manager.Usage().bytes_reserved, 88 * kMiB + 64);
}

TEST_F(MemoryManagerTest, LargeRequestGetsAPageOfAboutItsSize) {
  MemoryManager manager(&storage_, {});
  const uint64_t size = 300 * kMiB + 5;
  const SliceId id = MustReserve(manager, size);
  EXPECT_USAGE(manager, 1, size, 59, RoundUp(size, 64));
  EXPECT_EQ(manager.Locate(id)->offset, 0u);
  EXPECT_EQ(storage_.Resource(manager.Locate(id)->storage)->size, RoundUp(size, 64));
}

TEST_F(MemoryManagerTest, CleanupReturnsEveryFreePage) {
  MemoryManager manager(&storage_, {});
  std::vector<SliceId> ids;
  for (uint64_t size : {uint64_t{100}, kMiB, 4 * kMiB, 40 * kMiB}) {
    ids.push_back(MustReserve(manager, size));
  }
  const SliceId keep = MustReserve(manager, 200);  // Shares the first small page.
  for (SliceId id : ids) manager.Free(id);
  manager.Cleanup();
  EXPECT_USAGE(manager, 1, 200, 56, 8 * kMiB);
  EXPECT_EQ(storage_.allocation_count(), 1u);
  manager.Free(keep);
  manager.Cleanup();
  EXPECT_USAGE(manager, 0, 0, 0, 0);
  EXPECT_EQ(storage_.allocation_count(), 0u);
}

TEST_F(MemoryManagerTest, IdsAreNeverReusedAcrossCleanup) {
  MemoryManager manager(&storage_, {});
  std::set<SliceId> seen;
  for (int round = 0; round < 20; ++round) {
    std::vector<SliceId> ids;
    for (uint64_t size : {uint64_t{64}, uint64_t{100000}, 3 * kMiB, 17 * kMiB}) {
      ids.push_back(MustReserve(manager, size));
      EXPECT_TRUE(seen.insert(ids.back()).second) << "id " << ids.back() << " reused";
    }
    for (SliceId id : ids) manager.Free(id);
    manager.Cleanup();
  }
}

TEST_F(MemoryManagerTest, LimitIsEnforcedAndAFailureChangesNothing) {
  MemoryManager manager(&storage_, WithLimit(16 * kMiB));
  MustReserve(manager, 10 * kMiB);  // A medium page, capped at the limit: 16 MiB.
  const MemoryUsage before = manager.Usage();
  EXPECT_EQ(before.bytes_reserved, 16 * kMiB);
  absl::StatusOr<SliceId> failed = manager.Reserve(8 * kMiB);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(failed.status().message(), HasSubstr("cannot reserve 8388608 bytes"));
  EXPECT_THAT(failed.status().message(), HasSubstr("memory_limit 16777216 bytes"));
  EXPECT_THAT(failed.status().message(), HasSubstr("16777216 bytes reserved"));
  EXPECT_TRUE(manager.Usage() == before);
  EXPECT_EQ(storage_.bytes_allocated(), 16 * kMiB);
  EXPECT_TRUE(manager.Reserve(6 * kMiB).ok());  // What is left in the page still fits.
}

TEST_F(MemoryManagerTest, LimitReturnsFreePagesBeforeFailing) {
  MemoryManager manager(&storage_, WithLimit(20 * kMiB));
  manager.Free(MustReserve(manager, 20 * kMiB));  // An exclusive page, kept free.
  EXPECT_EQ(manager.Usage().bytes_reserved, 20 * kMiB);
  MustReserve(manager, 4 * kMiB);  // Needs a 20 MiB medium page: the free page must go.
  EXPECT_USAGE(manager, 1, 4 * kMiB, 0, 20 * kMiB);
  EXPECT_EQ(storage_.allocation_count(), 1u);
}

TEST_F(MemoryManagerTest, PagesAreNeverLargerThanTheLimit) {
  MemoryManager manager(&storage_, WithLimit(4 * kMiB));
  MustReserve(manager, 100);
  EXPECT_EQ(manager.Usage().bytes_reserved, 4 * kMiB);
  MustReserve(manager, 3 * kMiB);  // Same page: the capped levels merged.
  EXPECT_EQ(manager.Usage().bytes_reserved, 4 * kMiB);
  EXPECT_EQ(manager.Reserve(kMiB).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(manager.Reserve(kMiB - 128).ok());
}

TEST_F(MemoryManagerTest, SmallRequestFallsBackWhenAPageDoesNotFit) {
  MemoryManager manager(&storage_, WithLimit(9 * kMiB));
  for (int i = 0; i < 8; ++i) MustReserve(manager, kMiB);  // Fills an 8 MiB page.
  EXPECT_EQ(manager.Usage().bytes_reserved, 8 * kMiB);
  const SliceId small = MustReserve(manager, 100);  // No room for another 8 MiB page.
  EXPECT_USAGE(manager, 9, 8 * kMiB + 100, 28, 8 * kMiB + 128);
  EXPECT_EQ(storage_.Resource(manager.Locate(small)->storage)->size, 128u);
  manager.Free(small);
  MustReserve(manager, 120);  // Reuses the free 128-byte page.
  EXPECT_EQ(manager.Usage().bytes_reserved, 8 * kMiB + 128);
}

TEST_F(MemoryManagerTest, SmallRequestUsesFreeRoomOfALargerPool) {
  MemoryManager manager(&storage_, WithLimit(72 * kMiB));
  const SliceId medium = MustReserve(manager, 2 * kMiB);   // Medium page: 64 MiB.
  for (int i = 0; i < 8; ++i) MustReserve(manager, kMiB);  // Small page: 8 MiB, full.
  EXPECT_EQ(manager.Usage().bytes_reserved, 72 * kMiB);
  const SliceId small = MustReserve(manager, 1000);  // No room for another small page.
  EXPECT_EQ(manager.Locate(small)->storage, manager.Locate(medium)->storage);
  EXPECT_EQ(manager.Usage().bytes_reserved, 72 * kMiB);
}

TEST_F(MemoryManagerTest, DeviceRefusalReturnsFreePagesAndRetries) {
  HostStorageOptions options;
  options.capacity = 20 * kMiB;
  HostStorage device(options);
  MemoryManager manager(&device, {});
  manager.Free(MustReserve(manager, 20 * kMiB));
  // 17 MiB would waste too much of the free 20 MiB page, and the device has no room for both.
  MustReserve(manager, 17 * kMiB);
  EXPECT_USAGE(manager, 1, 17 * kMiB, 0, 17 * kMiB);
  absl::StatusOr<SliceId> failed = manager.Reserve(4 * kMiB);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(failed.status().message(), HasSubstr("cannot reserve 4194304 bytes"));
  EXPECT_THAT(failed.status().message(), HasSubstr("host storage"));
  EXPECT_USAGE(manager, 1, 17 * kMiB, 0, 17 * kMiB);
}

// Random reserve/free/cleanup against a shadow model, under a tight limit (with failures) and a
// loose one: exact counts, bounded padding, no two live slices overlap, contents kept.
void RunRandom(uint32_t seed, uint64_t limit, int steps) {
  SCOPED_TRACE(testing::Message() << "seed " << seed << " limit " << limit);
  HostStorage storage;
  MemoryManager manager(&storage, WithLimit(limit));
  std::mt19937_64 rng(seed);
  std::map<SliceId, uint64_t> live;  // id -> size
  std::set<SliceId> seen;
  uint64_t in_use = 0;
  uint64_t min_padding = 0;  // Alignment padding; exclusive pages may add up to 1/8 more.
  uint64_t max_waste = 0;
  int failures = 0;
  for (int step = 0; step < steps; ++step) {
    const uint64_t roll = rng() % 100;
    if (roll < 2) {
      const MemoryUsage before = manager.Usage();
      manager.Cleanup();
      const MemoryUsage after = manager.Usage();
      ASSERT_EQ(after.number_allocs, before.number_allocs);
      ASSERT_EQ(after.bytes_padding, before.bytes_padding);
      ASSERT_LE(after.bytes_reserved, before.bytes_reserved);
    } else if (live.empty() || roll < 52) {
      const uint64_t kind = rng() % 100;
      const uint64_t size = kind < 70   ? 1 + rng() % (64 << 10)
                            : kind < 95 ? kMiB + rng() % (15 * kMiB)
                                        : 16 * kMiB + rng() % (24 * kMiB);
      const MemoryUsage before = manager.Usage();
      absl::StatusOr<SliceId> id = manager.Reserve(size);
      if (!id.ok()) {
        ASSERT_EQ(id.status().code(), absl::StatusCode::kResourceExhausted) << id.status();
        ASSERT_TRUE(manager.Usage() == before) << "a failed Reserve changed usage";
        ++failures;
        continue;
      }
      ASSERT_TRUE(seen.insert(*id).second) << "id reused";
      const SliceLocation location = manager.Locate(*id).value();
      uint8_t* base = storage.Resource(location.storage)->host_ptr + location.offset;
      base[0] = static_cast<uint8_t>(*id);
      base[size - 1] = static_cast<uint8_t>(*id);
      live.emplace(*id, size);
      in_use += size;
      min_padding += RoundUp(size, 64) - size;
      max_waste += RoundUp(size, 64) / 8;
    } else {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      manager.Free(it->first);
      in_use -= it->second;
      min_padding -= RoundUp(it->second, 64) - it->second;
      max_waste -= RoundUp(it->second, 64) / 8;
      live.erase(it);
    }
    const MemoryUsage usage = manager.Usage();
    ASSERT_EQ(usage.number_allocs, live.size());
    ASSERT_EQ(usage.bytes_in_use, in_use);
    ASSERT_GE(usage.bytes_padding, min_padding);
    ASSERT_LE(usage.bytes_padding, min_padding + max_waste);
    ASSERT_LE(usage.bytes_reserved, limit);
    ASSERT_LE(usage.bytes_in_use + usage.bytes_padding, usage.bytes_reserved);
    ASSERT_EQ(usage.bytes_reserved, storage.bytes_allocated());
    if (step % 64 != 0) continue;
    std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
    for (const auto& [id, size] : live) {
      const SliceLocation location = manager.Locate(id).value();
      ASSERT_EQ(location.size, size);
      ASSERT_EQ(location.offset % 64, 0u);
      const StorageResource page = storage.Resource(location.storage).value();
      ASSERT_LE(location.offset + size, page.size);
      const uint8_t* base = page.host_ptr + location.offset;
      ASSERT_EQ(base[0], static_cast<uint8_t>(id));
      ASSERT_EQ(base[size - 1], static_cast<uint8_t>(id));
      ranges.emplace_back(reinterpret_cast<uintptr_t>(base),
                          reinterpret_cast<uintptr_t>(base) + size);
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i) {
      ASSERT_LE(ranges[i - 1].second, ranges[i].first) << "live slices overlap";
    }
  }
  for (const auto& [id, size] : live) manager.Free(id);
  manager.Cleanup();
  EXPECT_USAGE(manager, 0, 0, 0, 0);
  EXPECT_EQ(storage.allocation_count(), 0u);
  if (limit < (uint64_t{1} << 30)) {
    EXPECT_GT(failures, 0) << "the tight limit was never reached";
  } else {
    EXPECT_EQ(failures, 0);
  }
}

TEST(MemoryManagerRandomTest, TightLimit) {
  for (uint32_t seed : {11u, 12u, 13u}) RunRandom(seed, 160 * kMiB, 3000);
}

TEST(MemoryManagerRandomTest, LooseLimit) {
  for (uint32_t seed : {21u, 22u}) RunRandom(seed, uint64_t{1} << 40, 3000);
}

}  // namespace
}  // namespace cubed
