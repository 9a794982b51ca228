// The Prometheus text of a StatsSnapshot: families with HELP and TYPE, cumulative histogram
// buckets ending in +Inf, one sample per device and per code seen.

#include "server/metrics/metrics_text.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "server/metrics/metrics.h"

namespace cubed {
namespace {

TEST(MetricsTextTest, RendersCountersHistogramsAndDeviceGauges) {
  Metrics metrics;
  MethodMetrics& create = metrics.method(Method::kCreate);
  create.codes.Count(absl::StatusCode::kOk);
  create.codes.Count(absl::StatusCode::kOk);
  create.codes.Count(absl::StatusCode::kNotFound);
  create.queue.Observe(absl::Microseconds(7));   // First bucket (<= 10).
  create.queue.Observe(absl::Microseconds(30));  // <= 50.
  create.queue.Observe(absl::Seconds(100));      // +Inf.
  StatsSnapshot stats;
  metrics.Snapshot(&stats);
  DeviceGauges gauges;
  gauges.device = 0;
  gauges.memory.number_allocs = 3;
  gauges.memory.bytes_in_use = 4096;
  gauges.sessions = 2;
  stats.devices.push_back(gauges);
  stats.open_streams = 1;

  const std::string text = PrometheusText(stats);
  for (const char* line : {
           "# TYPE cubed_requests_total counter\n",
           "cubed_requests_total{method=\"Create\",code=\"OK\"} 2\n",
           "cubed_requests_total{method=\"Create\",code=\"NOT_FOUND\"} 1\n",
           "# TYPE cubed_request_queue_microseconds histogram\n",
           "cubed_request_queue_microseconds_bucket{method=\"Create\",le=\"10\"} 1\n",
           "cubed_request_queue_microseconds_bucket{method=\"Create\",le=\"50\"} 2\n",
           "cubed_request_queue_microseconds_bucket{method=\"Create\",le=\"10000000\"} 2\n",
           "cubed_request_queue_microseconds_bucket{method=\"Create\",le=\"+Inf\"} 3\n",
           "cubed_request_queue_microseconds_count{method=\"Create\"} 3\n",
           "cubed_memory_allocations{device=\"0\"} 3\n",
           "cubed_memory_in_use_bytes{device=\"0\"} 4096\n",
           "cubed_sessions{device=\"0\"} 2\n",
           "cubed_open_streams 1\n",
       }) {
    EXPECT_TRUE(absl::StrContains(text, line)) << "missing: " << line;
  }
  // A code never seen has no sample; every method has its histogram.
  EXPECT_FALSE(absl::StrContains(text, "code=\"INTERNAL\""));
  EXPECT_TRUE(absl::StrContains(text, "cubed_request_queue_microseconds_count{method=\"Sync\"} 0"));
}

}  // namespace
}  // namespace cubed
