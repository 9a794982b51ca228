#include "tests/bench/cpu/daemon_child.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace cubed::cpubench {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

absl::StatusOr<std::unique_ptr<DaemonChild>> DaemonChild::Start(
    const std::string& binary, const std::string& dir, const std::vector<std::string>& flags) {
  std::unique_ptr<DaemonChild> d(new DaemonChild());
  d->log_path_ = dir + "/cubed.log";
  const std::string ready = dir + "/ready";
  std::vector<std::string> args = {binary, "--listen=" + dir + "/cubed.sock",
                                   "--tcp=127.0.0.1:0", "--ready_file=" + ready};
  args.insert(args.end(), flags.begin(), flags.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork failed: errno ", errno));
  if (pid == 0) {
    int log = open(d->log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (log >= 0) dup2(log, 2);
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
      dup2(null, 0);
      dup2(null, 1);
    }
    execv(argv[0], argv.data());
    _exit(127);
  }
  d->pid_ = pid;

  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      d->pid_ = -1;
      return absl::FailedPreconditionError(absl::StrCat(
          binary, " exited (status ", status, ") before it was ready; log:\n", d->LogTail()));
    }
    std::string text = ReadAll(ready);
    if (absl::StrContains(text, "tcp=") && absl::EndsWith(text, "\n")) {
      for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
        if (absl::ConsumePrefix(&line, "unix=")) d->unix_address_ = std::string(line);
        if (absl::ConsumePrefix(&line, "tcp=")) d->tcp_address_ = std::string(line);
      }
      if (!d->unix_address_.empty() && !d->tcp_address_.empty()) return d;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return absl::DeadlineExceededError(
      absl::StrCat(binary, " did not write ", ready, " within 30 s; log:\n", d->LogTail()));
}

DaemonChild::~DaemonChild() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
    absl::SleepFor(absl::Milliseconds(10));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
}

std::string DaemonChild::LogTail(size_t max_bytes) const {
  std::string log = ReadAll(log_path_);
  return log.size() <= max_bytes ? log : log.substr(log.size() - max_bytes);
}

}  // namespace cubed::cpubench
