#include "tests/integration/child_client.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/client.h"

namespace cubed::integration {
namespace {

constexpr char kAddressFlag[] = "--child_client=";
constexpr char kBytesFlag[] = "--child_bytes=";

[[noreturn]] void RunChild(const std::string& address, uint64_t bytes) {
  ClientOptions options;
  options.address = address;
  options.timeout = absl::Seconds(20);
  auto client = Client::Connect(options);
  if (!client.ok()) {
    fprintf(stderr, "child: %s\n", client.status().ToString().c_str());
    _exit(1);
  }
  auto h = (*client)->Empty(bytes);
  // On the session stream the allocation is only queued: the sync makes sure the daemon ran it.
  const absl::Status s = h.ok() ? (*client)->Sync().get() : h.status();
  if (!s.ok()) {
    fprintf(stderr, "child: %s\n", s.ToString().c_str());
    _exit(1);
  }
  printf("ready\n");
  fflush(stdout);
  for (;;) pause();
}

}  // namespace

void MaybeRunChildClient(int argc, char** argv) {
  std::string address;
  uint64_t bytes = 0;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (absl::StartsWith(arg, kAddressFlag))
      address = std::string(arg.substr(strlen(kAddressFlag)));
    if (absl::StartsWith(arg, kBytesFlag) &&
        !absl::SimpleAtoi(arg.substr(strlen(kBytesFlag)), &bytes)) {
      _exit(2);
    }
  }
  if (!address.empty()) RunChild(address, bytes);
}

absl::StatusOr<pid_t> StartChildClient(const std::string& address, uint64_t bytes,
                                       absl::Duration timeout) {
  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError("pipe failed");
  std::string exe = "/proc/self/exe";
  std::string a1 = absl::StrCat(kAddressFlag, address);
  std::string a2 = absl::StrCat(kBytesFlag, bytes);
  std::vector<char*> argv = {exe.data(), a1.data(), a2.data(), nullptr};
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    // Only async-signal-safe calls between fork and exec.
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(fds[1]);
  pollfd p{fds[0], POLLIN, 0};
  char buf[16] = {};
  ssize_t n = 0;
  if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) == 1) {
    n = read(fds[0], buf, sizeof(buf) - 1);
  }
  close(fds[0]);
  if (n <= 0 || std::string(buf, n) != "ready\n") {
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    return absl::InternalError(absl::StrCat("child client did not get ready (wait status ", status,
                                            ", said \"", std::string(buf, n > 0 ? n : 0), "\")"));
  }
  return pid;
}

}  // namespace cubed::integration
