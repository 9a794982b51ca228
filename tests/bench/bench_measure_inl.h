#pragma once

// Template definitions for bench_measure.h.

#include "absl/time/time.h"
#include "common/status_macros.h"

namespace cubed::bench {

template <typename Fn>
absl::StatusOr<Profiled> ProfiledSeconds(Client& client, int count, Fn run) {
  for (int i = 0; i < 2; ++i) RETURN_IF_ERROR(run());
  RETURN_IF_ERROR(client.StartProfile());
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < count; ++i) RETURN_IF_ERROR(run());
  Profiled p;
  p.issue_s = SecondsSince(t0);
  ASSIGN_OR_RETURN(absl::Duration elapsed, client.EndProfile());
  p.device_s = absl::ToDoubleSeconds(elapsed);
  return p;
}

}  // namespace cubed::bench
