#include "storage/compute_storage_conformance.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace cubed {
namespace {

// Start address of a resource: host or device.
uint64_t AddressOf(const StorageResource& resource) {
  return resource.host_ptr != nullptr ? reinterpret_cast<uintptr_t>(resource.host_ptr)
                                      : resource.device_ptr;
}

TEST_P(ComputeStorageConformance, AlignmentIsAPowerOfTwo) {
  const uint64_t a = storage_->alignment();
  EXPECT_GT(a, 0u);
  EXPECT_EQ(a & (a - 1), 0u) << a;
}

TEST_P(ComputeStorageConformance, AllocationsAreAlignedSizedAndDisjoint) {
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [start, end)
  for (uint64_t size : {uint64_t{1}, uint64_t{63}, uint64_t{64}, uint64_t{4095}, uint64_t{4097},
                        uint64_t{1} << 20}) {
    absl::StatusOr<StorageId> id = storage_->Alloc(size);
    ASSERT_TRUE(id.ok()) << id.status();
    absl::StatusOr<StorageResource> resource = storage_->Resource(*id);
    ASSERT_TRUE(resource.ok()) << resource.status();
    EXPECT_EQ(resource->size, size);
    const uint64_t address = AddressOf(*resource);
    ASSERT_NE(address, 0u);
    EXPECT_EQ(address % storage_->alignment(), 0u) << "size " << size;
    if (resource->host_ptr != nullptr) std::memset(resource->host_ptr, 0xab, size);
    ranges.emplace_back(address, address + size);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    EXPECT_LE(ranges[i - 1].second, ranges[i].first) << "allocations overlap";
  }
}

TEST_P(ComputeStorageConformance, ZeroBytesIsInvalidArgument) {
  EXPECT_EQ(storage_->Alloc(0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(ComputeStorageConformance, IdsAreNeverReused) {
  std::set<StorageId> seen;
  for (int i = 0; i < 200; ++i) {
    absl::StatusOr<StorageId> id = storage_->Alloc(128);
    ASSERT_TRUE(id.ok()) << id.status();
    EXPECT_TRUE(seen.insert(*id).second) << "id " << *id << " reused";
    if (i % 3 != 0) storage_->Dealloc(*id);
  }
}

TEST_P(ComputeStorageConformance, ResourceOfUnknownOrFreedIdIsNotFound) {
  absl::StatusOr<StorageId> id = storage_->Alloc(256);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(storage_->Resource(*id + 1000).status().code(), absl::StatusCode::kNotFound);
  storage_->Dealloc(*id);
  EXPECT_EQ(storage_->Resource(*id).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(ComputeStorageConformance, DeallocOfUnknownIdIsIgnored) {
  absl::StatusOr<StorageId> id = storage_->Alloc(256);
  ASSERT_TRUE(id.ok()) << id.status();
  storage_->Dealloc(*id + 1000);
  absl::StatusOr<StorageResource> resource = storage_->Resource(*id);
  ASSERT_TRUE(resource.ok()) << resource.status();
  EXPECT_EQ(resource->size, 256u);
  storage_->Dealloc(*id);
}

TEST_P(ComputeStorageConformance, NewAllocationsReadZeroWhenPromised) {
  if (!storage_->capabilities().zeroes_new_allocations) GTEST_SKIP() << "promises nothing";
  for (uint64_t size : {uint64_t{64}, uint64_t{5000}, uint64_t{1} << 20}) {
    absl::StatusOr<StorageId> id = storage_->Alloc(size);
    ASSERT_TRUE(id.ok()) << id.status();
    absl::StatusOr<StorageResource> resource = storage_->Resource(*id);
    ASSERT_TRUE(resource.ok()) << resource.status();
    if (resource->host_ptr == nullptr) continue;  // Device memory: the backend's own test.
    const std::vector<uint8_t> zeros(size, 0);
    EXPECT_EQ(std::memcmp(resource->host_ptr, zeros.data(), size), 0) << size;
    std::memset(resource->host_ptr, 0xcd, size);
    storage_->Dealloc(*id);
  }
}

}  // namespace

std::string ComputeStorageFactoryName(const testing::TestParamInfo<ComputeStorageFactory>& info) {
  return info.param.name;
}

}  // namespace cubed
