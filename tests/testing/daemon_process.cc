#include "tests/testing/daemon_process.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace cubed::testing {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::string TestBackend() {
  const char* env = getenv("CUBED_TEST_BACKEND");
  return env != nullptr && env[0] != '\0' ? env : "cpu";
}

int TestBackendWire() { return TestBackend() == "cuda" ? 2 : 1; }

std::string CubedBinaryPath() {
  if (const char* env = getenv("CUBED_BINARY")) return env;
  return CUBED_BINARY_PATH;
}

absl::StatusOr<std::unique_ptr<DaemonProcess>> DaemonProcess::Start(Options options) {
  std::unique_ptr<DaemonProcess> d(new DaemonProcess());
  char tmpl[] = "/tmp/cubed-test-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
  d->dir_ = tmpl;
  const std::string socket = options.socket.empty() ? d->dir_ + "/cubed.sock" : options.socket;
  const std::string ready = d->dir_ + "/ready";
  const std::string log = d->dir_ + "/log";
  d->unix_address_ = "unix:" + socket;

  std::vector<std::string> args = {
      options.binary.empty() ? CubedBinaryPath() : options.binary, "--listen=" + socket,
      "--ready_file=" + ready,
      "--backend=" + (options.backend.empty() ? TestBackend() : options.backend)};
  if (access(args[0].c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat(args[0], ": not an executable file"));
  }
  if (options.tcp) {
    args.push_back("--tcp=127.0.0.1:0");
    // Plain TCP unless the test configures TLS itself (docs/security.md).
    bool tls = false;
    for (const std::string& f : options.flags) tls |= absl::StartsWith(f, "--tls_cert=");
    if (!tls) args.push_back("--insecure_tcp");
  }
  for (auto& f : options.flags) args.push_back(f);
  // Flags for every daemon of a run (e.g. a suite repeated with --fast_execute_decode).
  if (const char* extra = getenv("CUBED_TEST_DAEMON_FLAGS")) {
    for (absl::string_view f : absl::StrSplit(extra, ' ', absl::SkipEmpty())) {
      args.emplace_back(f);
    }
  }

  pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    FILE* out = freopen(log.c_str(), "w", stderr);
    (void)out;
    if (!options.working_dir.empty() && chdir(options.working_dir.c_str()) != 0) _exit(126);
    if (options.file_size_limit.has_value()) {
      const rlimit limit{*options.file_size_limit, *options.file_size_limit};
      if (setrlimit(RLIMIT_FSIZE, &limit) != 0) _exit(126);
    }
    if (options.open_files_limit.has_value()) {
      const rlimit limit{*options.open_files_limit, *options.open_files_limit};
      if (setrlimit(RLIMIT_NOFILE, &limit) != 0) _exit(126);
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  d->pid_ = pid;

  const absl::Time deadline = absl::Now() + options.start_timeout;
  while (absl::Now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      d->exited_ = true;
      return absl::InternalError(
          absl::StrCat("cubed exited before it served (status ", status, "):\n", d->Log()));
    }
    std::string contents = ReadFile(ready);
    if (!contents.empty() && contents.back() == '\n') {
      for (absl::string_view line : absl::StrSplit(contents, '\n')) {
        if (absl::ConsumePrefix(&line, "tcp="))
          d->tcp_address_ = std::string(line.data(), line.size());
      }
      return d;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("cubed did not become ready in time:\n", d->Log()));
}

absl::StatusOr<int> DaemonProcess::Stop(int signal, absl::Duration timeout) {
  if (exited_) return absl::FailedPreconditionError("daemon already stopped");
  kill(pid_, signal);
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      return 128 + WTERMSIG(status);
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("cubed did not exit within ", absl::FormatDuration(timeout)));
}

std::string DaemonProcess::Log() const { return ReadFile(dir_ + "/log"); }

std::string DaemonProcess::LogTail(size_t max_bytes) const {
  const std::string log = Log();
  return log.size() > max_bytes ? log.substr(log.size() - max_bytes) : log;
}

absl::StatusOr<ExitedProcess> RunCubedToExit(const std::vector<std::string>& args,
                                             const std::string& working_dir, absl::Duration timeout,
                                             std::optional<uint64_t> file_size_limit) {
  char tmpl[] = "/tmp/cubed-run-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
  const std::string dir = tmpl;
  const std::string out_path = dir + "/out";
  const std::string err_path = dir + "/err";
  std::vector<std::string> argv_strings = {CubedBinaryPath()};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    if (freopen(out_path.c_str(), "w", stdout) == nullptr) _exit(126);
    if (freopen(err_path.c_str(), "w", stderr) == nullptr) _exit(126);
    if (!working_dir.empty() && chdir(working_dir.c_str()) != 0) _exit(126);
    if (file_size_limit.has_value()) {
      const rlimit limit{*file_size_limit, *file_size_limit};
      if (setrlimit(RLIMIT_FSIZE, &limit) != 0) _exit(126);
    }
    std::vector<char*> argv;
    for (auto& a : argv_strings) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  bool exited = false;
  const absl::Time deadline = absl::Now() + timeout;
  while (!exited && absl::Now() < deadline) {
    exited = waitpid(pid, &status, WNOHANG) == pid;
    if (!exited) absl::SleepFor(absl::Milliseconds(10));
  }
  if (!exited) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  ExitedProcess result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = ReadFile(out_path);
  result.err = ReadFile(err_path);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (!exited) {
    return absl::DeadlineExceededError(
        absl::StrCat("cubed ", absl::StrJoin(args, " "), " still ran after ",
                     absl::FormatDuration(timeout), " (killed); stderr:\n", result.err));
  }
  return result;
}

DaemonProcess::~DaemonProcess() {
  if (!exited_ && pid_ > 0) {
    if (!Stop(SIGTERM, absl::Seconds(10)).ok()) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

}  // namespace cubed::testing
