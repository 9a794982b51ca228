#pragma once

// DaemonProcess: starts the real `cubed` binary for a test (or a benchmark program) on a
// temporary Unix socket (and TCP port 0 when asked), waits until it serves, and stops it when
// destroyed.

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace cubed::testing {

class DaemonProcess {
 public:
  struct Options {
    std::vector<std::string> flags;  // Extra flags, e.g. "--memory_limit=64MiB".
    bool tcp =
        false;  // Also listen on 127.0.0.1:0 (plain, --insecure_tcp, unless flags has --tls_cert).
    absl::Duration start_timeout = absl::Seconds(20);
    std::string binary;       // The cubed binary; empty: CubedBinaryPath().
    std::string backend;      // --backend= value; empty: TestBackend().
    std::string working_dir;  // The daemon's current directory; empty: this process's.
    std::optional<uint64_t> open_files_limit;  // The daemon's RLIMIT_NOFILE, when set.
    // The daemon's RLIMIT_FSIZE in bytes, when set: a write past it fails EFBIG, as on a full
    // disk (its log file counts too).
    std::optional<uint64_t> file_size_limit;
    // The Unix socket to listen on (e.g. a restart on the socket of a daemon that stopped);
    // empty: a fresh one in the daemon's temporary directory.
    std::string socket;
  };

  // Starts the daemon and waits for its ready file. The error carries the daemon's log.
  static absl::StatusOr<std::unique_ptr<DaemonProcess>> Start(Options options);
  static absl::StatusOr<std::unique_ptr<DaemonProcess>> Start() { return Start(Options{}); }

  // Stops the daemon (SIGTERM, then SIGKILL after 10 s) if it still runs, and removes its files.
  ~DaemonProcess();

  // "unix:/tmp/cubed-test-XXXXXX/cubed.sock" (or "unix:" + Options::socket)
  const std::string& unix_address() const { return unix_address_; }
  // "127.0.0.1:PORT" when started with tcp, else empty.
  const std::string& tcp_address() const { return tcp_address_; }
  pid_t pid() const { return pid_; }

  // Sends `signal` and waits up to `timeout` for the exit. Returns the exit code, or
  // 128 + signal when the daemon died of a signal; DEADLINE_EXCEEDED if it did not exit.
  absl::StatusOr<int> Stop(int signal, absl::Duration timeout = absl::Seconds(15));

  // Everything the daemon wrote to stderr so far.
  std::string Log() const;
  // Its last `max_bytes`.
  std::string LogTail(size_t max_bytes = 4000) const;

 private:
  DaemonProcess() = default;
  pid_t pid_ = -1;
  bool exited_ = false;
  std::string dir_;
  std::string unix_address_;
  std::string tcp_address_;
};

// How a cubed process that ran to its end ended.
struct ExitedProcess {
  int exit_code = 0;  // Its exit status, or 128 + signal when it died of a signal.
  std::string out;    // Everything it wrote to stdout.
  std::string err;    // Everything it wrote to stderr.
};

// Runs the cubed binary with `args` (argv[1..]) in `working_dir` (empty: this process's) and
// waits for it to exit. DEADLINE_EXCEEDED, with its output, when it still runs after `timeout`
// (it is killed then): a daemon that should have refused its flags and started instead.
// `file_size_limit`: the child's RLIMIT_FSIZE in bytes (its stdout and stderr files included).
absl::StatusOr<ExitedProcess> RunCubedToExit(
    const std::vector<std::string>& args, const std::string& working_dir,
    absl::Duration timeout = absl::Seconds(10),
    std::optional<uint64_t> file_size_limit = std::nullopt);

// Path of the cubed binary under test: $CUBED_BINARY, else the one CMake built.
std::string CubedBinaryPath();

// Backend the daemon under test runs: $CUBED_TEST_BACKEND (cpu or cuda), default cpu. The same
// suite runs against every backend present (the GPU runs set it to cuda).
std::string TestBackend();

// The wire enum value of TestBackend() (cubed.v1.DeviceInfo.Backend: 1 = cpu, 2 = cuda).
int TestBackendWire();

}  // namespace cubed::testing
