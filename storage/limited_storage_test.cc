#include "storage/limited_storage.h"

#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/compute_storage_conformance.h"
#include "storage/host_storage.h"

namespace cubed {
namespace {

using ::testing::HasSubstr;

struct LimitedHost {
  HostStorage host;
  LimitedStorage limited{&host, uint64_t{1} << 30};
};

INSTANTIATE_TEST_SUITE_P(Limited, ComputeStorageConformance,
                         testing::Values(ComputeStorageFactory{
                             "LimitedHost",
                             [] {
                               auto stack = std::make_shared<LimitedHost>();
                               return std::shared_ptr<ComputeStorage>(stack, &stack->limited);
                             }}),
                         ComputeStorageFactoryName);

TEST(LimitedStorageTest, RefusesPastTheLimitAndNamesIt) {
  HostStorage host;
  LimitedStorage limited(&host, 1000);
  absl::StatusOr<StorageId> a = limited.Alloc(700);
  ASSERT_TRUE(a.ok());
  absl::StatusOr<StorageId> b = limited.Alloc(301);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(b.status().message(), HasSubstr("301 bytes"));
  EXPECT_THAT(b.status().message(), HasSubstr("1000 bytes"));
  EXPECT_THAT(b.status().message(), HasSubstr("700 bytes held"));
  EXPECT_EQ(limited.bytes_allocated(), 700u);
  EXPECT_EQ(host.allocation_count(), 1u);
  EXPECT_TRUE(limited.Alloc(300).ok());  // Exactly up to the limit is fine.
  EXPECT_EQ(limited.bytes_available(), 0u);
  limited.Dealloc(*a);
  EXPECT_EQ(limited.bytes_allocated(), 300u);
  EXPECT_EQ(host.allocation_count(), 1u);
}

TEST(LimitedStorageTest, UpstreamErrorsPassThroughUncounted) {
  HostStorageOptions options;
  options.capacity = 100;
  HostStorage host(options);
  LimitedStorage limited(&host, 1000);
  EXPECT_EQ(limited.Alloc(200).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(limited.Alloc(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(limited.bytes_allocated(), 0u);
}

TEST(LimitedStorageTest, DoesNotForwardDeallocOfIdsItDidNotAllocate) {
  HostStorage host;
  LimitedStorage limited(&host, 1000);
  absl::StatusOr<StorageId> direct = host.Alloc(64);
  ASSERT_TRUE(direct.ok());
  limited.Dealloc(*direct);
  EXPECT_EQ(host.allocation_count(), 1u);
  EXPECT_EQ(limited.bytes_allocated(), 0u);
}

}  // namespace
}  // namespace cubed
