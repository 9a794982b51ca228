#include "storage/host_storage.h"

#include <cstdint>
#include <cstring>
#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/compute_storage_conformance.h"

// A huge posix_memalign must return null (RESOURCE_EXHAUSTED) under ASan too, not abort.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }

namespace cubed {
namespace {

using ::testing::HasSubstr;

INSTANTIATE_TEST_SUITE_P(
    Host, ComputeStorageConformance,
    testing::Values(ComputeStorageFactory{"Align64",
                                          [] { return std::make_shared<HostStorage>(); }},
                    ComputeStorageFactory{"Align4096",
                                          [] {
                                            HostStorageOptions options;
                                            options.alignment = 4096;
                                            return std::make_shared<HostStorage>(options);
                                          }}),
    ComputeStorageFactoryName);

TEST(HostStorageTest, AlignmentIsAtLeast64AndAPowerOfTwo) {
  EXPECT_EQ(HostStorage().alignment(), 64u);
  EXPECT_EQ(HostStorage(HostStorageOptions{8, UINT64_MAX}).alignment(), 64u);
  EXPECT_EQ(HostStorage(HostStorageOptions{100, UINT64_MAX}).alignment(), 128u);
  EXPECT_EQ(HostStorage(HostStorageOptions{512, UINT64_MAX}).alignment(), 512u);
}

TEST(HostStorageTest, LargeAllocationsArePageAligned) {
  HostStorage storage;
  for (int i = 0; i < 8; ++i) {
    absl::StatusOr<StorageId> id = storage.Alloc(8192 + 64 * i);
    ASSERT_TRUE(id.ok()) << id.status();
    absl::StatusOr<StorageResource> resource = storage.Resource(*id);
    ASSERT_TRUE(resource.ok());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(resource->host_ptr) % 4096, 0u);
    EXPECT_EQ(resource->device_ptr, 0u);
  }
}

TEST(HostStorageTest, NewAllocationsAreZeroEvenAfterReuse) {
  for (uint64_t alignment : {uint64_t{64}, uint64_t{1} << 21}) {  // The latter over-maps.
    HostStorageOptions options;
    options.alignment = alignment;
    HostStorage storage(options);
    EXPECT_TRUE(storage.capabilities().zeroes_new_allocations);
    for (int round = 0; round < 2; ++round) {  // The second round reuses the freed memory.
      for (uint64_t size : {uint64_t{1}, uint64_t{100}, uint64_t{4095}, uint64_t{4096},
                            uint64_t{100000}, uint64_t{8} << 20}) {
        SCOPED_TRACE(testing::Message() << "alignment " << alignment << " size " << size);
        absl::StatusOr<StorageId> id = storage.Alloc(size);
        ASSERT_TRUE(id.ok()) << id.status();
        uint8_t* p = storage.Resource(*id)->host_ptr;
        EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % alignment, 0u);
        uint64_t nonzero = 0;
        for (uint64_t i = 0; i < size; ++i) nonzero += p[i] != 0;
        EXPECT_EQ(nonzero, 0u);
        std::memset(p, 0xab, size);
        storage.Dealloc(*id);
      }
    }
  }
}

TEST(HostStorageTest, CountsBytesAndAllocations) {
  HostStorage storage;
  absl::StatusOr<StorageId> a = storage.Alloc(100);
  absl::StatusOr<StorageId> b = storage.Alloc(1000);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(storage.bytes_allocated(), 1100u);
  EXPECT_EQ(storage.allocation_count(), 2u);
  storage.Dealloc(*a);
  EXPECT_EQ(storage.bytes_allocated(), 1000u);
  EXPECT_EQ(storage.allocation_count(), 1u);
}

TEST(HostStorageTest, CapacityIsResourceExhausted) {
  HostStorageOptions options;
  options.capacity = 1000;
  HostStorage storage(options);
  absl::StatusOr<StorageId> a = storage.Alloc(600);
  ASSERT_TRUE(a.ok());
  absl::StatusOr<StorageId> b = storage.Alloc(500);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(b.status().message(), HasSubstr("500"));
  EXPECT_THAT(b.status().message(), HasSubstr("1000"));
  EXPECT_EQ(storage.bytes_allocated(), 600u);
  storage.Dealloc(*a);
  EXPECT_TRUE(storage.Alloc(1000).ok());
}

TEST(HostStorageTest, HeapRefusalIsResourceExhausted) {
  HostStorage storage;
  absl::StatusOr<StorageId> id = storage.Alloc(uint64_t{1} << 62);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kResourceExhausted);
  id = storage.Alloc(UINT64_MAX);  // Rounding up overflows.
  EXPECT_EQ(id.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(storage.bytes_allocated(), 0u);
  EXPECT_EQ(storage.allocation_count(), 0u);
}

}  // namespace
}  // namespace cubed
