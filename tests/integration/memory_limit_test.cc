// The memory limit reached by many sessions at once (issue 15's drill): every request past it is
// RESOURCE_EXHAUSTED naming the limit, the limit holds for all sessions together, a bystander's
// bytes stay intact, and when the sessions close every byte and handle comes back.

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "tests/integration/integration_test.h"

namespace cubed::integration {
namespace {

class MemoryLimitTest : public DaemonTest {
 protected:
  static void SetUpTestSuite() { StartDaemon({"--memory_limit=64MiB"}); }
};

TEST_F(MemoryLimitTest, ManySessionsAtTheLimitFailCleanlyAndGiveEverythingBack) {
  auto bystander = Connect();
  ASSERT_NE(bystander, nullptr);
  const std::vector<uint8_t> kept(1 << 20, 0x5a);
  auto kept_handle = bystander->Create(kept);
  ASSERT_TRUE(kept_handle.ok()) << kept_handle.status();
  auto before = bystander->GetMemoryUsage();
  ASSERT_TRUE(before.ok()) << before.status();

  constexpr int kSessions = 8;
  constexpr uint64_t kElems = 1 << 20;  // 4 MiB tensors: 16 would fill the limit alone.
  std::atomic<int> granted{0}, refused{0}, other{0};
  std::vector<std::string> messages(kSessions);
  std::vector<std::thread> threads;
  for (int i = 0; i < kSessions; ++i) {
    threads.emplace_back([&, i] {
      auto client = Connect();
      if (client == nullptr) {
        ++other;
        return;
      }
      std::vector<Tensor> mine;
      for (int j = 0; j < 16; ++j) {
        auto t = client->EmptyTensor({kElems}, 4);
        if (t.ok()) {
          ++granted;
          mine.push_back(*std::move(t));
        } else if (t.status().code() == absl::StatusCode::kResourceExhausted) {
          ++refused;
          messages[i] = std::string(t.status().message());
        } else {
          ++other;
          messages[i] = t.status().ToString();
        }
      }
      // Every session keeps what it got until all have asked; then closes (its client goes).
      while (granted + refused + other < kSessions * 16) absl::SleepFor(absl::Milliseconds(1));
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(other.load(), 0);
  EXPECT_GT(refused.load(), 0);
  EXPECT_LE(granted.load() * (kElems * 4), uint64_t{64} << 20);  // The limit holds for all.
  EXPECT_GE(granted.load(), 8);  // Most of the limit was handed out, not refused early.
  for (const std::string& m : messages) {
    if (!m.empty()) {
      EXPECT_THAT(m, ::testing::HasSubstr("memory limit"));
    }
  }

  // The bystander's bytes are intact and every session's memory came back.
  auto read = bystander->Read({*kept_handle}).get();
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 1u);
  EXPECT_EQ((*read)[0], std::string(kept.begin(), kept.end()));
  absl::StatusOr<MemoryUsage> after;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  do {
    after = bystander->GetMemoryUsage();
    ASSERT_TRUE(after.ok()) << after.status();
    if (after->bytes_in_use == before->bytes_in_use) break;
    absl::SleepFor(absl::Milliseconds(20));
  } while (absl::Now() < deadline);
  EXPECT_EQ(after->bytes_in_use, before->bytes_in_use);
  EXPECT_EQ(after->number_allocs, before->number_allocs);

  // With everything back, the whole limit is usable again by one session.
  auto again = Connect();
  ASSERT_NE(again, nullptr);
  std::vector<Tensor> refill;
  for (int j = 0; j < 12; ++j) {  // 48 MiB of the 64, beside the bystander's 1 MiB.
    auto t = again->EmptyTensor({kElems}, 4);
    ASSERT_TRUE(t.ok()) << j << ": " << t.status();
    refill.push_back(*std::move(t));
  }
}

}  // namespace
}  // namespace cubed::integration
