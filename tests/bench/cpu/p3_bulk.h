#pragma once

// P3 (docs/benchmarks.md): create + read of one large buffer through the SDK's chunked bulk path
// (the session stream's Upload / Download, ClientOptions::bulk_threshold) against a raw
// socket stream of the same bytes there and back between the same process pair (this process
// and the baseline child), over a Unix socket and over TCP loopback. Goal: >= 0.8x the raw
// stream (PERFORMANCE.md).

#include <cstdint>
#include <functional>
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
    bool read_into = false;  // Client::ReadInto into a buffer reused (as the raw path's) instead
                             // of Client::Read's fresh strings.
  };
  std::vector<Setting> settings = {{4ull << 20, 0}, {4ull << 20, 0, true}, {4ull << 20, 1},
                                   {4ull << 20, 2}, {4ull << 20, 4},       {4ull << 20, 8}};
};

// One way to the daemon and the baseline: "unix" or "tcp", the daemon's gRPC address that way,
// and how to connect to the baseline child's raw stream server that way.
struct BulkPath {
  std::string name;
  std::string daemon_address;
  std::function<absl::StatusOr<int>()> connect_raw;
  size_t settings = 0;  // The first this many of BulkOptions::settings; 0 = all.
};

// One row per path and setting in GiB/s, counting the bytes both ways (2 x bytes per round
// trip): "P3" for the first path's first setting, "P3t" for the TCP path's first, "P3*" for
// the diagnostic rest. Fails if the bytes read back differ from those created.
absl::StatusOr<std::vector<Row>> MeasureBulkCreateRead(const std::vector<BulkPath>& paths,
                                                       const BulkOptions& options);

}  // namespace cubed::cpubench
