#pragma once

// P3 (docs/benchmarks.md): create + read of one large buffer through the SDK's chunked bulk path
// (the session stream's Upload / Download, ClientOptions::bulk_threshold) against a raw
// Unix-socket stream of the same bytes there and back between the same process pair (this
// process and the baseline child). Goal: >= 0.8x the raw stream (PERFORMANCE.md).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/bench/cpu/bench_report.h"

namespace cubed::cpubench {

struct BulkOptions {
  uint64_t bytes = 256ull << 20;
  int repetitions = 5;  // Timed, after one untimed, verified warm-up.
  // (chunk size, lanes) measured (ClientOptions::bulk_chunk, bulk_lanes; 0 = by the cores);
  // the first is P3's figure (the SDK's defaults), the rest are diagnostic rows "P3*" (how
  // chunk size and lanes matter).
  struct Setting {
    uint64_t chunk;
    uint32_t lanes;
  };
  std::vector<Setting> settings = {
      {4ull << 20, 0}, {4ull << 20, 1}, {4ull << 20, 2}, {4ull << 20, 4}, {4ull << 20, 8}};
};

// One row per setting in GiB/s, counting the bytes both ways (2 x bytes per round trip).
// Fails if the bytes read back differ from those created.
absl::StatusOr<std::vector<Row>> MeasureBulkCreateRead(const std::string& daemon_address,
                                                       const std::string& raw_socket_path,
                                                       const BulkOptions& options);

}  // namespace cubed::cpubench
