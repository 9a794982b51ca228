#pragma once

// DaemonChild: the real `cubed` binary run by cubed-bench on a Unix socket in `dir` and on TCP
// 127.0.0.1:0, learned from its --ready_file; stopped (SIGTERM, then SIGKILL) when destroyed.

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cubed::cpubench {

class DaemonChild {
 public:
  // fork/execs `binary --listen=DIR/cubed.sock --tcp=127.0.0.1:0 --ready_file=DIR/ready
  // <flags...>` with stderr in DIR/cubed.log and waits up to 30 s for the ready file.
  // FAILED_PRECONDITION with the log tail when the daemon exits first; DEADLINE_EXCEEDED when
  // it never becomes ready.
  static absl::StatusOr<std::unique_ptr<DaemonChild>> Start(const std::string& binary,
                                                            const std::string& dir,
                                                            const std::vector<std::string>& flags);
  ~DaemonChild();

  // "unix:DIR/cubed.sock" and "127.0.0.1:PORT", as the ready file names them.
  const std::string& unix_address() const { return unix_address_; }
  const std::string& tcp_address() const { return tcp_address_; }
  pid_t pid() const { return pid_; }
  // Last `max_bytes` of the daemon's stderr.
  std::string LogTail(size_t max_bytes = 3000) const;

 private:
  DaemonChild() = default;
  pid_t pid_ = -1;
  std::string log_path_;
  std::string unix_address_;
  std::string tcp_address_;
};

}  // namespace cubed::cpubench
