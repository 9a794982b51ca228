#include "kernels/cpu/parallel_for.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace cubed::kernels {
namespace {

TEST(ParallelForTest, UsesEveryHardwareThread) {
  EXPECT_EQ(Parallelism(), std::max(1u, std::thread::hardware_concurrency()));
}

TEST(ParallelForTest, CoversEveryIndexExactlyOnce) {
  for (uint64_t n : {0ull, 1ull, 7ull, 1000ull, 100003ull}) {
    for (uint64_t grain : {1ull, 3ull, 64ull, 1000000ull}) {
      std::vector<std::atomic<int>> hits(n);
      ParallelFor(n, grain, [&](uint64_t b, uint64_t e) {
        ASSERT_LE(b, e);
        ASSERT_LE(e, n);
        for (uint64_t i = b; i < e; ++i) hits[i].fetch_add(1);
      });
      for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
    }
  }
}

TEST(ParallelForTest, RespectsGrain) {
  std::atomic<uint64_t> smallest{~0ull};
  ParallelFor(10000, 1000, [&](uint64_t b, uint64_t e) {
    if (e != 10000) {
      uint64_t cur = smallest.load();
      while (e - b < cur && !smallest.compare_exchange_weak(cur, e - b)) {
      }
    }
  });
  EXPECT_GE(smallest.load(), 1000u);
}

TEST(ParallelForTest, NestedAndConcurrentCallsFinish) {
  std::atomic<uint64_t> total{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&] {
      ParallelFor(64, 1, [&](uint64_t b, uint64_t e) {
        for (uint64_t i = b; i < e; ++i) {
          ParallelFor(100, 7, [&](uint64_t b2, uint64_t e2) { total.fetch_add(e2 - b2); });
        }
      });
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(total.load(), 4u * 64 * 100);
}

}  // namespace
}  // namespace cubed::kernels
