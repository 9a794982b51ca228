#include "storage/memory_manager.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
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
constexpr MemoryOwner kOwner = kFirstSessionOwner;

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
  SliceId MustReserve(MemoryManager& manager, uint64_t size, MemoryOwner owner = kOwner) {
    absl::StatusOr<Reservation> r = manager.Reserve(size, owner);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->slice : 0;
  }

  HostStorage storage_;
};

TEST_F(MemoryManagerTest, ZeroIsInvalidArgumentAndTooLargeIsResourceExhausted) {
  MemoryManagerOptions options;
  options.max_allocation = 1000;
  MemoryManager manager(&storage_, options);
  absl::StatusOr<Reservation> zero = manager.Reserve(0, kOwner);
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(zero.status().message(), HasSubstr("0 bytes"));
  absl::StatusOr<Reservation> big = manager.Reserve(1001, kOwner);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(big.status().message(), HasSubstr("1001"));
  EXPECT_THAT(big.status().message(), HasSubstr("max_allocation (1000 bytes)"));
  EXPECT_TRUE(manager.Reserve(1000, kOwner).ok());
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
  absl::StatusOr<Reservation> failed = manager.Reserve(8 * kMiB, kOwner);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(failed.status().message(), HasSubstr("cannot reserve 8388608 bytes"));
  EXPECT_THAT(failed.status().message(), HasSubstr("memory_limit 16777216 bytes"));
  EXPECT_THAT(failed.status().message(), HasSubstr("16777216 bytes reserved"));
  EXPECT_TRUE(manager.Usage() == before);
  EXPECT_EQ(storage_.bytes_allocated(), 16 * kMiB);
  EXPECT_TRUE(manager.Reserve(6 * kMiB, kOwner).ok());  // What is left in the page still fits.
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
  EXPECT_EQ(manager.Reserve(kMiB, kOwner).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(manager.Reserve(kMiB - 128, kOwner).ok());
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
  absl::StatusOr<Reservation> failed = manager.Reserve(4 * kMiB, kOwner);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(failed.status().message(), HasSubstr("cannot reserve 4194304 bytes"));
  EXPECT_THAT(failed.status().message(), HasSubstr("host storage"));
  EXPECT_USAGE(manager, 1, 17 * kMiB, 0, 17 * kMiB);
}

// Note [Owner-tagged memory] (memory_manager.cc).
TEST_F(MemoryManagerTest, SameOwnerIsNotDirtyAnotherOwnerIs) {
  constexpr MemoryOwner kA = kFirstSessionOwner, kB = kFirstSessionOwner + 1;
  MemoryManager manager(&storage_, MemoryManagerOptions{});
  for (uint64_t size : {uint64_t{100}, 2 * kMiB, 20 * kMiB}) {  // Each pool of the ladder.
    SCOPED_TRACE(testing::Message() << "size " << size);
    auto reserve = [&](MemoryOwner owner) {
      absl::StatusOr<Reservation> r = manager.Reserve(size, owner);
      EXPECT_TRUE(r.ok()) << r.status();
      if (r.ok()) manager.Free(r->slice);
      return r.ok() && r->dirty;
    };
    manager.Cleanup();
    EXPECT_FALSE(reserve(kA)) << "fresh host pages are zero";
    EXPECT_FALSE(reserve(kA)) << "A reusing its own memory";
    EXPECT_TRUE(reserve(kB)) << "B after A";
    // A sliced slice merges back with the rest of A's free block (B + A: unknown); an exclusive
    // page is B's alone.
    if (size > 16 * kMiB) {
      EXPECT_FALSE(reserve(kB)) << "B reusing what it zeroed and used";
    }
    EXPECT_TRUE(reserve(kUnknownOwner)) << "no owner: always zeroed unless known zero";
    EXPECT_TRUE(reserve(kUnknownOwner)) << "the unknown owner owns nothing";
    EXPECT_TRUE(reserve(kZeroedOwner)) << "counts as the unknown owner";
    EXPECT_TRUE(reserve(kA)) << "after memory of no session";
  }
}

TEST_F(MemoryManagerTest, UninitializedSliceIsDirtyEvenForItsOwner) {
  MemoryManager manager(&storage_, MemoryManagerOptions{});
  for (uint64_t size : {uint64_t{100}, 20 * kMiB}) {
    absl::StatusOr<Reservation> r = manager.Reserve(size, kOwner);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(r->dirty);
    manager.FreeUninitialized(r->slice);  // E.g. a create whose copy failed.
    r = manager.Reserve(size, kOwner);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->dirty) << "memory its owner never initialized is nobody's, " << size;
    manager.Free(r->slice);
  }
  EXPECT_EQ(manager.Usage().number_allocs, 0u);
}

// A storage like HostStorage that promises nothing about new allocations, as CudaStorage.
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

TEST_F(MemoryManagerTest, NewPagesOfAStorageThatDoesNotZeroAreDirty) {
  UnzeroedStorage storage;
  MemoryManager manager(&storage, MemoryManagerOptions{});
  for (uint64_t size : {uint64_t{100}, 2 * kMiB, 20 * kMiB}) {
    absl::StatusOr<Reservation> r = manager.Reserve(size, kOwner);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->dirty) << size;
    absl::StatusOr<Reservation> rest = manager.Reserve(size, kOwner);  // Same page or a new one.
    ASSERT_TRUE(rest.ok()) << rest.status();
    EXPECT_TRUE(rest->dirty) << "the rest of a page of unknown content, " << size;
    manager.Free(r->slice);
    r = manager.Reserve(size, kOwner);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(r->dirty) << "the owner's own bytes once zeroed and used, " << size;
  }
}

TEST_F(MemoryManagerTest, ExtentIsTheRoundedSizeOrTheReusedPage) {
  MemoryManager manager(&storage_, MemoryManagerOptions{});
  const SliceId small = MustReserve(manager, 40);
  EXPECT_EQ(manager.Locate(small)->extent, 64u);
  manager.Free(MustReserve(manager, 20 * kMiB));
  const SliceId large = MustReserve(manager, 20 * kMiB - 4096);  // Reuses the 20 MiB page.
  EXPECT_EQ(manager.Locate(large)->size, 20 * kMiB - 4096);
  EXPECT_EQ(manager.Locate(large)->extent, 20 * kMiB);
}

// Random reserve/free/cleanup by several owners, each writing its slices, with the caller
// zeroing dirty reservations as a backend does: no reservation ever shows another owner's bytes,
// padding included, through the pools' splits, merges, fallbacks and cleanups.
TEST(MemoryManagerRandomTest, NoOwnerEverSeesAnothersBytes) {
  for (uint32_t seed : {31u, 32u}) {
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    HostStorage storage;
    MemoryManager manager(&storage, WithLimit(48 * kMiB));
    std::mt19937_64 rng(seed);
    std::vector<std::pair<SliceId, MemoryOwner>> live;
    int dirty = 0, clean = 0;
    for (int step = 0; step < 2000; ++step) {
      const uint64_t roll = rng() % 100;
      if (roll < 2) {
        manager.Cleanup();
      } else if (live.empty() || roll < 52) {
        const MemoryOwner owner = kFirstSessionOwner + rng() % 3;
        const uint64_t kind = rng() % 100;
        const uint64_t size = kind < 90   ? 1 + rng() % 4096
                              : kind < 98 ? kMiB + rng() % kMiB
                                          : 16 * kMiB + rng() % (2 * kMiB);
        absl::StatusOr<Reservation> r = manager.Reserve(size, owner);
        if (!r.ok()) {
          ASSERT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
          continue;
        }
        const SliceLocation where = manager.Locate(r->slice).value();
        ASSERT_GE(where.extent, where.size);
        uint8_t* base = storage.Resource(where.storage)->host_ptr + where.offset;
        if (r->dirty) {
          std::memset(base, 0, where.extent);
          ++dirty;
        } else {
          ++clean;
          const uint8_t mine = static_cast<uint8_t>(owner);
          const uint8_t* begin = base;
          const uint8_t* end = base + where.extent;
          const uint8_t* other =
              std::find_if(begin, end, [mine](uint8_t b) { return b != 0 && b != mine; });
          ASSERT_EQ(other, end) << "owner " << owner << " sees byte " << int{*other} << " at "
                                << other - base << " of " << where.extent;
        }
        std::memset(base, static_cast<uint8_t>(owner), size);
        live.emplace_back(r->slice, owner);
      } else {
        const size_t i = rng() % live.size();
        manager.Free(live[i].first);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
    EXPECT_GT(dirty, 100);
    EXPECT_GT(clean, 100);
    for (const auto& [id, owner] : live) manager.Free(id);
  }
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
      absl::StatusOr<Reservation> r = manager.Reserve(size, kOwner);
      if (!r.ok()) {
        ASSERT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
        ASSERT_TRUE(manager.Usage() == before) << "a failed Reserve changed usage";
        ++failures;
        continue;
      }
      const SliceId id = r->slice;
      ASSERT_TRUE(seen.insert(id).second) << "id reused";
      const SliceLocation location = manager.Locate(id).value();
      uint8_t* base = storage.Resource(location.storage)->host_ptr + location.offset;
      base[0] = static_cast<uint8_t>(id);
      base[size - 1] = static_cast<uint8_t>(id);
      live.emplace(id, size);
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
