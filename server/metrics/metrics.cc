#include "server/metrics/metrics.h"

#include <iterator>
#include <string>

#include "absl/time/clock.h"
#include "server/channel/stream_command.h"

namespace cubed {
namespace {

constexpr std::memory_order kRelaxed = std::memory_order_relaxed;

constexpr const char* kCodeNames[] = {
    "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
    "DATA_LOSS", "UNAUTHENTICATED"};

}  // namespace

void LatencyHistogram::Observe(absl::Duration latency) {
  const int64_t us = absl::ToInt64Microseconds(latency);
  const uint64_t value = us < 0 ? 0 : static_cast<uint64_t>(us);
  size_t bucket = 0;
  while (bucket < kNumLatencyBounds && value > kLatencyBoundsUs[bucket]) ++bucket;
  buckets_[bucket].fetch_add(1, kRelaxed);
  sum_us_.fetch_add(value, kRelaxed);
}

HistogramSnapshot LatencyHistogram::Snapshot() const {
  HistogramSnapshot out;
  uint64_t cumulative = 0;
  out.buckets.reserve(kNumLatencyBounds);
  for (size_t i = 0; i < kNumLatencyBounds; ++i) {
    cumulative += buckets_[i].load(kRelaxed);
    out.buckets.push_back(cumulative);
  }
  out.count = cumulative + buckets_[kNumLatencyBounds].load(kRelaxed);
  out.sum_us = sum_us_.load(kRelaxed);
  return out;
}

void CodeCounters::Count(absl::StatusCode code) {
  int i = static_cast<int>(code);
  if (i < 0 || i >= kNumCodes) i = static_cast<int>(absl::StatusCode::kUnknown);
  counts_[i].fetch_add(1, kRelaxed);
}

std::vector<CodeCount> CodeCounters::Snapshot() const {
  std::vector<CodeCount> out;
  for (int i = 0; i < kNumCodes; ++i) {
    const uint64_t n = counts_[i].load(kRelaxed);
    if (n != 0) out.push_back(CodeCount{kCodeNames[i], n});
  }
  return out;
}

Metrics::Metrics() : start_(absl::Now()) {}

StreamCommandMetrics& Metrics::stream_command(int kind) {
  if (kind < 0 || kind >= kMaxStreamKinds) kind = kMaxStreamKinds - 1;
  return stream_commands_[kind];
}

void Metrics::Snapshot(StatsSnapshot* out) const {
  out->latency_bounds_us.assign(std::begin(kLatencyBoundsUs), std::end(kLatencyBoundsUs));
  out->methods.clear();
  for (int i = 0; i < static_cast<int>(Method::kCount); ++i) {
    const MethodMetrics& m = methods_[i];
    out->methods.push_back(MethodSnapshot{
        std::string(MethodName(static_cast<Method>(i))), m.codes.Snapshot(), m.queue.Snapshot(),
        m.execution.Snapshot(), m.bytes_received.load(kRelaxed), m.bytes_sent.load(kRelaxed)});
  }
  out->stream_commands.clear();
  for (int i = 0; i < kMaxStreamKinds; ++i) {
    const absl::string_view name = KindName(static_cast<StreamCommand::Kind>(i));
    if (name == "unknown") continue;
    const StreamCommandMetrics& m = stream_commands_[i];
    out->stream_commands.push_back(StreamCommandSnapshot{
        std::string(name), m.codes.Snapshot(), m.queue.Snapshot(), m.execution.Snapshot()});
  }
  const int64_t uptime = absl::ToInt64Microseconds(absl::Now() - start_);
  out->uptime_us = uptime < 0 ? 0 : static_cast<uint64_t>(uptime);
}

}  // namespace cubed
