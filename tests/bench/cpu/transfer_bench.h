#pragma once

// Create + read of one buffer through the SDK's unary path (Client::Create, then Client::Read)
// against a raw Unix-socket stream of the same bytes there and back between the same process
// pair (this process and the baseline child), and against a bare gRPC unary echo of them.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "tests/bench/cpu/bench_report.h"

namespace cubed::cpubench {

struct TransferOptions {
  uint64_t bytes = 64ull << 20;
  int repetitions = 5;  // Timed, after one untimed warm-up of each.
};

// Two rows in GiB/s, counting the bytes both ways (2 x bytes per round trip): against the raw
// stream, and (diagnostic, id "unary*") against one bare gRPC unary echo of the same bytes
// (`echo_address`). The note gives the Create and Read halves separately. Fails if the bytes
// read back differ from those created.
absl::StatusOr<std::vector<Row>> MeasureCreateRead(const std::string& daemon_address,
                                                   const std::string& raw_socket_path,
                                                   const std::string& echo_address,
                                                   const TransferOptions& options);

}  // namespace cubed::cpubench
