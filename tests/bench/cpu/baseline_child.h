#pragma once

// BaselineChild: a forked child process that serves the baselines cubed-bench divides by:
//  * a bare gRPC echo service (callback API; tests/bench/cpu/echo.proto) on a Unix socket and on
//    TCP 127.0.0.1:0 — the floor for a tiny unary call (P1) and for a 64 MiB unary call; its
//    EchoViaThread answers from a second thread (diagnostic);
//  * a raw stream server on a Unix socket and on TCP 127.0.0.1:0: it reads an 8-byte length and
//    that many bytes, then writes the same bytes back — the floor for create + read of a buffer.
// The child exits when the parent closes its control pipe (also when the parent dies).

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace cubed::cpubench {

class BaselineChild {
 public:
  // Forks the child serving in `dir` (an existing folder) and waits up to 20 s for it. Call it
  // before this process uses gRPC (the child must not inherit gRPC's threads).
  static absl::StatusOr<std::unique_ptr<BaselineChild>> Start(const std::string& dir);
  // Closes the control pipe and reaps the child (SIGKILL after 5 s).
  ~BaselineChild();

  const std::string& echo_unix_address() const { return echo_unix_; }  // "unix:DIR/echo.sock"
  const std::string& echo_tcp_address() const { return echo_tcp_; }    // "127.0.0.1:PORT"
  const std::string& raw_socket_path() const { return raw_path_; }     // "DIR/raw.sock"
  int raw_tcp_port() const { return raw_tcp_port_; }                   // On 127.0.0.1.
  pid_t pid() const { return pid_; }

 private:
  BaselineChild() = default;
  pid_t pid_ = -1;
  int control_fd_ = -1;
  std::string echo_unix_;
  std::string echo_tcp_;
  std::string raw_path_;
  int raw_tcp_port_ = 0;
};

// Sends `data` on the connected Unix stream socket `fd` (length-prefixed) and reads the echoed
// bytes back into `back` (resized to data.size()). The BaselineChild's raw protocol.
absl::Status RawRoundTrip(int fd, const std::string& data, std::string* back);

// Connects to the Unix stream socket at `path`; returns the fd.
absl::StatusOr<int> ConnectUnix(const std::string& path);
// Connects to TCP 127.0.0.1:`port`; returns the fd.
absl::StatusOr<int> ConnectTcp(int port);

}  // namespace cubed::cpubench
