// StreamCommandTally: Note [Stream command tally] (stream_command_tally.h).

#include "server/metrics/stream_command_tally.h"

#include <algorithm>
#include <iterator>

namespace cubed {

void StreamCommandTally::Observe(StreamCommandMetrics& metrics, absl::Duration queue,
                                 absl::Duration execution, absl::StatusCode code) {
  if (metrics_ != &metrics) {
    Flush();
    metrics_ = &metrics;
  }
  uint64_t us = 0;
  ++queue_[LatencyHistogram::Bucket(queue, &us)];
  queue_sum_us_ += us;
  ++execution_[LatencyHistogram::Bucket(execution, &us)];
  execution_sum_us_ += us;
  ++codes_[CodeCounters::Index(code)];
}

void StreamCommandTally::Flush() {
  if (metrics_ == nullptr) return;
  metrics_->queue.Add(queue_, queue_sum_us_);
  metrics_->execution.Add(execution_, execution_sum_us_);
  metrics_->codes.Add(codes_);
  std::fill(std::begin(queue_), std::end(queue_), 0);
  std::fill(std::begin(execution_), std::end(execution_), 0);
  std::fill(std::begin(codes_), std::end(codes_), 0);
  queue_sum_us_ = execution_sum_us_ = 0;
  metrics_ = nullptr;
}

}  // namespace cubed
