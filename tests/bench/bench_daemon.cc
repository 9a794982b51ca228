#include "tests/bench/bench_daemon.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace cubed::bench {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Waits up to `timeout` for `pid` to exit; true when it did.
bool WaitExit(pid_t pid, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (waitpid(pid, nullptr, WNOHANG) == pid) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

}  // namespace

std::string DefaultDaemonPath() { return CUBED_BENCH_DAEMON_PATH; }

absl::StatusOr<std::unique_ptr<BenchDaemon>> BenchDaemon::Start(
    const std::string& binary, const std::vector<std::string>& flags) {
  if (access(binary.c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("--cubed=", binary, ": not an executable file"));
  }
  std::unique_ptr<BenchDaemon> d(new BenchDaemon());
  char tmpl[] = "/tmp/cubed-bench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
  d->dir_ = tmpl;
  const std::string socket = d->dir_ + "/cubed.sock";
  const std::string ready = d->dir_ + "/ready";
  const std::string log = d->dir_ + "/log";
  d->address_ = "unix:" + socket;

  std::vector<std::string> args = {binary, "--listen=" + socket, "--ready_file=" + ready};
  args.insert(args.end(), flags.begin(), flags.end());
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    if (freopen(log.c_str(), "w", stderr) == nullptr) _exit(126);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  d->pid_ = pid;

  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (absl::Now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      d->pid_ = -1;
      return absl::FailedPreconditionError(absl::StrCat(
          "cubed exited before it served (wait status ", status, "); its log:\n", d->LogTail()));
    }
    const std::string contents = ReadFile(ready);
    if (!contents.empty() && contents.back() == '\n') return d;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("cubed did not become ready within 60 s; its log:\n", d->LogTail()));
}

BenchDaemon::~BenchDaemon() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    if (!WaitExit(pid_, absl::Seconds(10))) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
}

std::string BenchDaemon::LogTail(size_t max_bytes) const {
  const std::string log = ReadFile(dir_ + "/log");
  return log.size() > max_bytes ? log.substr(log.size() - max_bytes) : log;
}

}  // namespace cubed::bench
