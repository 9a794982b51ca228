#include "tests/testing/child_test.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace cubed::testing {

absl::StatusOr<pid_t> StartReadyChild(const std::string& filter, const std::string& env_name,
                                      const std::string& env_value) {
  int out[2];
  if (pipe(out) != 0) return absl::InternalError("pipe failed");
  const std::string filter_arg = "--gtest_filter=" + filter;
  const pid_t child = fork();
  if (child < 0) return absl::InternalError("fork failed");
  if (child == 0) {  // Only async-signal-safe calls until exec.
    dup2(out[1], STDOUT_FILENO);
    setenv(env_name.c_str(), env_value.c_str(), 1);
    execl("/proc/self/exe", "child", filter_arg.c_str(), nullptr);
    _exit(127);
  }
  close(out[1]);
  std::string said;
  char c;
  while (said.find("ready") == std::string::npos && read(out[0], &c, 1) == 1) said.push_back(c);
  close(out[0]);
  if (said.find("ready") == std::string::npos) {
    waitpid(child, nullptr, 0);
    return absl::InternalError(absl::StrCat("the child ended before it was ready: ", said));
  }
  return child;
}

}  // namespace cubed::testing
