// The daemon's command line against the real binary: --help lists the daemon's flags, --version
// its version, --listen takes the unix:PATH form the daemon prints (and a bare path), and every
// other scheme is refused before anything is served.

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
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
  EXPECT_THAT(run->out, HasSubstr("Unix socket to serve on: PATH or unix:PATH"));
  EXPECT_THAT(run->out, HasSubstr("Most device memory each device's pool may hold"));
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

// --listen in the form the daemon prints ("serving on unix:PATH", the ready file's unix=) and
// cubectl's --address takes, gRPC's unix:///PATH, or a bare PATH: the daemon serves at PATH, and
// the address it logs reaches it.
class ListenFormTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ListenFormTest, ServesAtThePathTheAddressNames) {
  TempDir sockets;
  TempDir cwd;
  const std::string path = sockets.path() + "/x.sock";
  testing::DaemonProcess::Options options;
  options.flags = {"--listen=" + GetParam() + path};  // After DaemonProcess's own --listen: wins.
  options.working_dir = cwd.path();
  auto daemon = testing::DaemonProcess::Start(options);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  EXPECT_TRUE(std::filesystem::exists(path)) << (*daemon)->Log();
  EXPECT_THAT(cwd.Entries(), ::testing::IsEmpty()) << "a relative socket path was served";
  EXPECT_THAT((*daemon)->Log(), HasSubstr("serving on unix:" + path + "\n"));

  ClientOptions client_options;
  client_options.address = "unix:" + path;
  client_options.timeout = absl::Seconds(10);
  auto client = Client::Connect(client_options);
  ASSERT_TRUE(client.ok()) << client.status() << "\n" << (*daemon)->Log();
  auto info = (*client)->GetInfo();
  EXPECT_TRUE(info.ok()) << info.status();
}

INSTANTIATE_TEST_SUITE_P(Forms, ListenFormTest, ::testing::Values("unix:", "unix://", ""),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           return p.param == "unix:" ? std::string("UnixColonPath")
                                  : p.param.empty()  ? std::string("BarePath")
                                                     : std::string("UnixSlashSlashPath");
                         });

// A file-size limit (RLIMIT_FSIZE) makes writes past it fail: the daemon reports the ready file
// it could not write and exits 1, where SIGXFSZ's default would have killed it (exit 153).
TEST(CommandLineTest, AFileSizeLimitFailsAWriteInsteadOfKillingTheDaemon) {
  TempDir cwd;
  const std::string ready = cwd.path() + "/ready";
  auto run = testing::RunCubedToExit(
      {"--backend=cpu", "--listen=" + cwd.path() + "/cubed.sock", "--ready_file=" + ready},
      cwd.path(), absl::Seconds(10), /*file_size_limit=*/8);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->exit_code, 1) << run->err;  // Not 128 + SIGXFSZ.
  EXPECT_FALSE(std::filesystem::exists(ready));
  EXPECT_FALSE(std::filesystem::exists(ready + ".tmp"));  // Nothing half-written left behind.
}

TEST(CommandLineTest, ListenRefusesOtherSchemesNamingTheFlagTheValueAndTheForms) {
  for (const std::string value :
       {"tcp:127.0.0.1:0", "dns:///localhost:5000", "unix-abstract:cubed",
        "http://localhost/cubed.sock", "localhost:50051", "unix:", "unix://relative.sock"}) {
    SCOPED_TRACE(value);
    TempDir cwd;
    auto run = testing::RunCubedToExit({"--backend=cpu", "--listen=" + value}, cwd.path(),
                                       absl::Seconds(5));
    ASSERT_TRUE(run.ok()) << run.status();  // DEADLINE_EXCEEDED: it served instead.
    EXPECT_NE(run->exit_code, 0);
    EXPECT_THAT(run->err, HasSubstr("--listen=" + value + ": "));
    EXPECT_THAT(run->err, HasSubstr("PATH or unix:PATH"));
    EXPECT_THAT(run->err, HasSubstr("--tcp=HOST:PORT"));
    EXPECT_THAT(cwd.Entries(), ::testing::IsEmpty());
  }
}

TEST(CommandLineTest, SpinFlagsOutOfRangeAreRefusedNamingTheFlagAndTheRange) {
  for (const std::string flag : {"ring_spin_us", "loop_spin_us"}) {
    for (const std::string value : {"-2", "10001"}) {
      SCOPED_TRACE(flag + "=" + value);
      TempDir cwd;
      auto run = testing::RunCubedToExit(
          {"--backend=cpu", "--listen=" + cwd.path() + "/c.sock", "--" + flag + "=" + value},
          cwd.path(), absl::Seconds(5));
      ASSERT_TRUE(run.ok()) << run.status();
      EXPECT_NE(run->exit_code, 0);
      EXPECT_THAT(run->err, HasSubstr("--" + flag + "=" + value +
                                      ": expected -1 (automatic) or "
                                      "0 .. 10000"));
    }
  }
}

}  // namespace
}  // namespace cubed
