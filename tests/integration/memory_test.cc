// Memory usage as the daemon reports it around creates, releases and cleanups.

#include "tests/integration/integration_test.h"

namespace cubed::integration {
namespace {

using MemoryTest = DaemonTest;

TEST_F(MemoryTest, UsageFollowsCreateAndRelease) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto before = client->GetMemoryUsage();
  ASSERT_TRUE(before.ok()) << before.status();

  constexpr uint64_t kSize = 3 << 20;
  auto h = client->Create(ToBytes(std::vector<uint8_t>(kSize, 1)));
  ASSERT_TRUE(h.ok());
  auto e = client->Empty(1000);
  ASSERT_TRUE(e.ok());
  auto during = client->GetMemoryUsage();
  ASSERT_TRUE(during.ok());
  EXPECT_EQ(during->number_allocs, before->number_allocs + 2);
  EXPECT_EQ(during->bytes_in_use, before->bytes_in_use + kSize + 1000);
  EXPECT_GE(during->bytes_reserved, during->bytes_in_use + during->bytes_padding);

  h = absl::StatusOr<Handle>(Handle());
  e = absl::StatusOr<Handle>(Handle());
  ASSERT_TRUE(client->FlushReleases().ok());
  auto after = client->GetMemoryUsage();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->number_allocs, before->number_allocs);
  EXPECT_EQ(after->bytes_in_use, before->bytes_in_use);
  EXPECT_EQ(after->bytes_padding, before->bytes_padding);
}

TEST_F(MemoryTest, CleanupReturnsFreePagesAndReservedFalls) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto start = client->MemoryCleanup();
  ASSERT_TRUE(start.ok()) << start.status();
  {
    std::vector<Handle> handles;
    for (int i = 0; i < 4; ++i) {
      auto h = client->Empty(8 << 20);
      ASSERT_TRUE(h.ok()) << h.status();
      handles.push_back(*h);
    }
  }
  ASSERT_TRUE(client->FlushReleases().ok());
  auto released = client->GetMemoryUsage();
  ASSERT_TRUE(released.ok());
  EXPECT_EQ(released->bytes_in_use, start->bytes_in_use);
  EXPECT_GE(released->bytes_reserved, start->bytes_reserved + (32 << 20))
      << "freed pages stay reserved until a cleanup";

  auto cleaned = client->MemoryCleanup();
  ASSERT_TRUE(cleaned.ok()) << cleaned.status();
  EXPECT_LT(cleaned->bytes_reserved, released->bytes_reserved);
  EXPECT_LE(cleaned->bytes_reserved, start->bytes_reserved);
  auto again = client->GetMemoryUsage();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->bytes_reserved, cleaned->bytes_reserved) << "cleanup's answer is the usage";
}

TEST_F(MemoryTest, CleanupKeepsLiveData) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::vector<uint64_t> values(1 << 16);
  for (size_t i = 0; i < values.size(); ++i) values[i] = i * 2654435761u;
  auto h = client->Create(ToBytes(values));
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(client->MemoryCleanup().ok());
  EXPECT_EQ(FromBytes<uint64_t>(ReadOrDie(*client, *h)), values);
}

}  // namespace
}  // namespace cubed::integration
