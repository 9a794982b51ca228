#include "client/release_batcher.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace cubed {
namespace {

// Records every Release "RPC" the batcher sends.
class FakeDaemon {
 public:
  ReleaseBatcher::SendFn Sender() {
    return [this](const std::vector<uint64_t>& ids) {
      absl::MutexLock lock(&mu_);
      calls_.push_back(ids);
      return status_;
    };
  }
  std::vector<std::vector<uint64_t>> Calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  void SetStatus(absl::Status s) {
    absl::MutexLock lock(&mu_);
    status_ = std::move(s);
  }
  // Waits until at least `n` calls were made or `timeout` passes.
  bool AwaitCalls(size_t n, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto enough = [&] { return calls_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }

 private:
  absl::Mutex mu_;
  std::vector<std::vector<uint64_t>> calls_;
  absl::Status status_;
};

TEST(ReleaseBatcher, FullBatchGoesOutInOneCallWithoutWaitingForTheDelay) {
  FakeDaemon daemon;
  ReleaseBatcher batcher(daemon.Sender(), 64, absl::Hours(1));
  for (uint64_t id = 1; id <= 64; ++id) batcher.Enqueue(id);
  ASSERT_TRUE(daemon.AwaitCalls(1, absl::Seconds(10)));
  auto calls = daemon.Calls();
  ASSERT_EQ(calls.size(), 1u);
  ASSERT_EQ(calls[0].size(), 64u);
  EXPECT_EQ(calls[0].front(), 1u);
  EXPECT_EQ(calls[0].back(), 64u);
}

TEST(ReleaseBatcher, PartialBatchGoesOutAfterTheDelay) {
  FakeDaemon daemon;
  ReleaseBatcher batcher(daemon.Sender(), 64, absl::Milliseconds(20));
  batcher.Enqueue(7);
  batcher.Enqueue(8);
  ASSERT_TRUE(daemon.AwaitCalls(1, absl::Seconds(10)));
  auto calls = daemon.Calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0], (std::vector<uint64_t>{7, 8}));
}

TEST(ReleaseBatcher, FlushSendsNowAndReportsTheFirstErrorOnce) {
  FakeDaemon daemon;
  ReleaseBatcher batcher(daemon.Sender(), 64, absl::Hours(1));
  batcher.Enqueue(3);
  daemon.SetStatus(absl::NotFoundError("handle 3"));
  absl::Status s = batcher.Flush();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  ASSERT_EQ(daemon.Calls().size(), 1u);
  EXPECT_EQ(daemon.Calls()[0], (std::vector<uint64_t>{3}));
  // Nothing queued and the error was reported: the next flush is clean and sends nothing.
  EXPECT_TRUE(batcher.Flush().ok());
  EXPECT_EQ(daemon.Calls().size(), 1u);
}

TEST(ReleaseBatcher, CloseDropsQueuedIdsAndIgnoresLaterOnes) {
  FakeDaemon daemon;
  ReleaseBatcher batcher(daemon.Sender(), 64, absl::Hours(1));
  batcher.Enqueue(1);
  batcher.Close();
  batcher.Enqueue(2);
  EXPECT_TRUE(batcher.Flush().ok());
  EXPECT_TRUE(daemon.Calls().empty());
}

TEST(ReleaseBatcher, ManyThreadsLoseNoId) {
  FakeDaemon daemon;
  ReleaseBatcher batcher(daemon.Sender(), 64, absl::Milliseconds(5));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; i < 1000; ++i) batcher.Enqueue(t * 1000 + i + 1);
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(batcher.Flush().ok());
  std::vector<uint64_t> all;
  for (const auto& call : daemon.Calls()) {
    EXPECT_LE(call.size(), ReleaseBatcher::kMaxIdsPerCall);
    all.insert(all.end(), call.begin(), call.end());
  }
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), 4000u);
  for (uint64_t i = 0; i < 4000; ++i) EXPECT_EQ(all[i], i + 1);
}

// Note [Import keep-alive]: a keep-alive outlives its handle's release until taken after its id
// was queued; a failed flush buries it again; Close does not drop it, DropAll does; a detached
// handle's is kept until DropAll.
TEST(ReleaseBatcher, KeepAlivesStayBuriedUntilTakenOrDroppedAfterTheSessionsEnd) {
  FakeDaemon daemon;
  ReleaseBatcher batcher(daemon.Sender(), 64, absl::Hours(1));
  auto a = std::make_shared<int>(1);
  auto b = std::make_shared<int>(2);
  auto c = std::make_shared<int>(3);
  std::weak_ptr<int> wa = a, wb = b, wc = c;
  batcher.Enqueue(7, std::move(a));
  batcher.KeepUntilEnd(std::move(c));
  std::vector<std::shared_ptr<const void>> taken = batcher.TakeBuried();
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_TRUE(batcher.TakeBuried().empty());
  batcher.Rebury(std::move(taken));
  batcher.Enqueue(8, std::move(b));
  taken = batcher.TakeBuried();
  EXPECT_EQ(taken.size(), 2u);
  ASSERT_TRUE(batcher.Flush().ok());
  ASSERT_EQ(daemon.Calls().size(), 1u);
  EXPECT_EQ(daemon.Calls()[0], (std::vector<uint64_t>{7, 8}));
  taken.clear();
  EXPECT_TRUE(wa.expired() && wb.expired());
  EXPECT_FALSE(wc.expired()) << "a detached handle's keep-alive stays until DropAll";

  auto d = std::make_shared<int>(4);
  std::weak_ptr<int> wd = d;
  batcher.Close();
  batcher.Enqueue(9, std::move(d));  // After Close: not sent, but still buried.
  EXPECT_FALSE(wd.expired());
  batcher.DropAll();
  EXPECT_TRUE(wc.expired() && wd.expired());
  EXPECT_EQ(daemon.Calls().size(), 1u);
}

}  // namespace
}  // namespace cubed
