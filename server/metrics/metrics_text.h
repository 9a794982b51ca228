#pragma once

// The Prometheus text exposition format (version 0.0.4) of a StatsSnapshot: what
// GET /metrics answers (metrics_http.h). Every metric, its labels and meaning: docs/operations.md,
// "Metrics". Latencies are in microseconds, as the metric names say.

#include <string>

#include "server/metrics/stats_snapshot.h"

namespace cubed {

// Renders `stats`, with # HELP and # TYPE lines for every family. Pure; any thread.
std::string PrometheusText(const StatsSnapshot& stats);

}  // namespace cubed
