// The daemon's command line against the real binary: --help lists the daemon's flags, --version
// its version.

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/daemon_process.h"

namespace cubed {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A fresh directory, removed with everything in it when the test ends.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/cubed-cli-XXXXXX";
    if (mkdtemp(tmpl) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  // What the directory holds, e.g. a "unix:" directory a daemon made in its working directory.
  std::vector<std::string> Entries() const {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(path_, ec)) {
      names.push_back(e.path().filename().string());
    }
    return names;
  }

 private:
  std::string path_;
};

TEST(CommandLineTest, HelpListsTheDaemonsFlagsWithTheirHelpAndExitsZero) {
  TempDir cwd;
  auto run = testing::RunCubedToExit({"--help"}, cwd.path());
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->exit_code, 0) << run->err;
  EXPECT_THAT(run->out, Not(HasSubstr("No flags matched")));
  EXPECT_THAT(run->out, HasSubstr("cubed: an out-of-process compute server"));
  for (const char* flag : {"--listen", "--tcp", "--backend", "--memory_limit", "--session_lease",
                           "--max_message_bytes", "--auth_config", "--insecure_tcp", "--tls_cert",
                           "--metrics_listen", "--ready_file"}) {
    EXPECT_THAT(run->out, HasSubstr(absl::StrCat(flag, " ("))) << flag;
  }
  // Each with its help text.
  EXPECT_THAT(run->out, HasSubstr("Unix socket path to serve on"));
  EXPECT_THAT(run->out, HasSubstr("Most device memory the pools may hold"));
  EXPECT_THAT(run->out, HasSubstr("auto, cpu or cuda."));
  // Only the daemon's flags: Abseil's own (--flagfile, ...) are for --helpfull.
  EXPECT_THAT(run->out, Not(HasSubstr("--fromenv (")));
}

TEST(CommandLineTest, HelpfullListsEveryFlagAndExitsZero) {
  TempDir cwd;
  auto run = testing::RunCubedToExit({"--helpfull"}, cwd.path());
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->exit_code, 0) << run->err;
  EXPECT_THAT(run->out, HasSubstr("--listen ("));
  EXPECT_THAT(run->out, HasSubstr("--flagfile ("));
}

TEST(CommandLineTest, VersionPrintsTheVersionAndExitsZero) {
  TempDir cwd;
  auto run = testing::RunCubedToExit({"--version"}, cwd.path());
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->exit_code, 0) << run->err;
  EXPECT_EQ(run->out, absl::StrCat("cubed ", CUBED_VERSION, "\n"));
}

}  // namespace
}  // namespace cubed
