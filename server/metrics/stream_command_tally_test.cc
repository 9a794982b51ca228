#include "server/metrics/stream_command_tally.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "server/metrics/metrics.h"

namespace cubed {
namespace {

// The same observations through the tally and straight into another series give equal
// snapshots once the tally flushed, and nothing before.
TEST(StreamCommandTallyTest, AFlushedTallyEqualsDirectObservations) {
  StreamCommandMetrics tallied, direct;
  StreamCommandTally tally;
  const std::vector<int64_t> us = {-5, 0, 3, 10, 11, 999, 2500, 10000001, 42};
  for (size_t i = 0; i < us.size(); ++i) {
    const absl::Duration queue = absl::Microseconds(us[i]);
    const absl::Duration execution =
        absl::Microseconds(us[us.size() - 1 - i]) + absl::Nanoseconds(1);
    const absl::StatusCode code =
        i % 3 == 0 ? absl::StatusCode::kOk : static_cast<absl::StatusCode>(40 + i);  // Unknown.
    tally.Observe(tallied, queue, execution, code);
    direct.queue.Observe(queue);
    direct.execution.Observe(execution);
    direct.codes.Count(code);
  }
  EXPECT_EQ(tallied.queue.Snapshot().count, 0u);  // Not before the flush.
  tally.Flush();
  for (auto [a, b] : {std::pair{&tallied.queue, &direct.queue},
                      std::pair{&tallied.execution, &direct.execution}}) {
    const HistogramSnapshot x = a->Snapshot(), y = b->Snapshot();
    EXPECT_EQ(x.buckets, y.buckets);
    EXPECT_EQ(x.count, y.count);
    EXPECT_EQ(x.sum_us, y.sum_us);
  }
  const std::vector<CodeCount> x = tallied.codes.Snapshot(), y = direct.codes.Snapshot();
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(x[i].code, y[i].code);
    EXPECT_EQ(x[i].count, y[i].count);
  }
  tally.Flush();  // Empty: adds nothing more.
  EXPECT_EQ(tallied.queue.Snapshot().count, us.size());
}

TEST(StreamCommandTallyTest, AnotherSeriesFlushesTheFirstAndTheDestructorTheLast) {
  StreamCommandMetrics a, b;
  {
    StreamCommandTally tally;
    tally.Observe(a, absl::Microseconds(1), absl::Microseconds(2), absl::StatusCode::kOk);
    tally.Observe(a, absl::Microseconds(1), absl::Microseconds(2), absl::StatusCode::kOk);
    EXPECT_EQ(a.execution.Snapshot().count, 0u);
    tally.Observe(b, absl::Microseconds(1), absl::Microseconds(2), absl::StatusCode::kNotFound);
    EXPECT_EQ(a.execution.Snapshot().count, 2u);
    EXPECT_EQ(a.execution.Snapshot().sum_us, 4u);
    EXPECT_EQ(b.execution.Snapshot().count, 0u);
  }
  EXPECT_EQ(b.execution.Snapshot().count, 1u);
  ASSERT_EQ(b.codes.Snapshot().size(), 1u);
  EXPECT_EQ(b.codes.Snapshot()[0].code, "NOT_FOUND");
}

}  // namespace
}  // namespace cubed
