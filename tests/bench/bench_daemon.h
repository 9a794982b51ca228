#pragma once

// BenchDaemon: runs the real `cubed` binary for the benchmark on a Unix socket in a fresh
// temporary folder, waits until its --ready_file appears, and stops it when destroyed.

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cubed::bench {

class BenchDaemon {
 public:
  // Starts `binary --listen=SOCK --ready_file=FILE <flags...>` with its stderr in a log file and
  // waits up to 60 s for it to serve. FAILED_PRECONDITION with the daemon's log when it exits
  // first; DEADLINE_EXCEEDED when it does not become ready.
  static absl::StatusOr<std::unique_ptr<BenchDaemon>> Start(const std::string& binary,
                                                            const std::vector<std::string>& flags);

  // SIGTERM, then SIGKILL after 10 s; removes the temporary folder.
  ~BenchDaemon();

  // "unix:/tmp/cubed-bench-XXXXXX/cubed.sock".
  const std::string& address() const { return address_; }
  // The daemon's stderr so far (its last `max_bytes`).
  std::string LogTail(size_t max_bytes = 4000) const;

 private:
  BenchDaemon() = default;
  pid_t pid_ = -1;
  std::string dir_;
  std::string address_;
};

// The cubed binary of this build (set by CMake).
std::string DefaultDaemonPath();

}  // namespace cubed::bench
