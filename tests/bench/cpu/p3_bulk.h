#pragma once

// P3 (docs/benchmarks.md): create + read of one large buffer through the SDK's chunked bulk path
// (the session stream's Upload / Download, ClientOptions::bulk_threshold) against a raw
// Unix-socket stream of the same bytes there and back between the same process pair (this
// process and the baseline child). Goal: >= 0.5x the raw stream.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/bench/cpu/bench_report.h"

namespace cubed::cpubench {

struct BulkOptions {
  uint64_t bytes = 256ull << 20;
  int repetitions = 5;  // Timed, after one untimed, verified warm-up.
  // Chunk sizes measured; the first is P3's figure (the SDK's default), the rest are
  // diagnostic rows "P3*" (how the chunk size matters).
  std::vector<uint64_t> chunks = {4ull << 20, 1ull << 20};
};

// One row per chunk size in GiB/s, counting the bytes both ways (2 x bytes per round trip).
// Fails if the bytes read back differ from those created.
absl::StatusOr<std::vector<Row>> MeasureBulkCreateRead(const std::string& daemon_address,
                                                       const std::string& raw_socket_path,
                                                       const BulkOptions& options);

}  // namespace cubed::cpubench
