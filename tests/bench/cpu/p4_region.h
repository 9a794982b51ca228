#pragma once

// P4 on the CPU backend (docs/benchmarks.md; issue "local clients at in-process speed"): create +
// read of one large buffer through a shared-memory region (Client::CreateFromRegion,
// ReadIntoRegion: the bytes never cross gRPC) against what a copy there and back costs in this
// process: memcpy region -> buffer, buffer -> region, the same two copies the daemon must make.
// Goal: >= 0.8x memcpy.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/bench/cpu/bench_report.h"

namespace cubed::cpubench {

struct RegionOptions {
  uint64_t bytes = 256ull << 20;
  int repetitions = 5;  // Timed, after one untimed, verified warm-up.
};

// One row in GiB/s, counting the bytes both ways (2 x bytes per round trip). Fails if the bytes
// read back differ from those created.
absl::StatusOr<std::vector<Row>> MeasureRegionCreateRead(const std::string& daemon_address,
                                                         const RegionOptions& options);

}  // namespace cubed::cpubench
