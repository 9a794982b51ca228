// Runs the real cubectl binary against the real daemon, as a user or a script would.

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/cubectl/npy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/daemon_process.h"

namespace cubed::cubectl {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;
using ::testing::StartsWith;

struct Result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// The value of "key": "..." in a one-line JSON object, or "" when absent.
std::string JsonString(const std::string& json, const std::string& key) {
  const std::string prefix = absl::StrCat("\"", key, "\": \"");
  size_t start = json.find(prefix);
  if (start == std::string::npos) return "";
  start += prefix.size();
  return json.substr(start, json.find('"', start) - start);
}

std::string NpyF32(const std::vector<float>& values, std::vector<uint64_t> shape) {
  std::string data(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  auto file = EncodeNpy(ElemType::kF32, shape, data);
  EXPECT_TRUE(file.ok()) << file.status();
  return *file;
}

class CubectlTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto daemon = testing::DaemonProcess::Start();
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = std::move(*daemon).release();
    char tmpl[] = "/tmp/cubectl-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = new std::string(tmpl);
  }
  static void TearDownTestSuite() {
    if (dir_ != nullptr) std::filesystem::remove_all(*dir_);
    delete dir_;
    delete daemon_;
  }

  static std::string Path(const std::string& name) { return absl::StrCat(*dir_, "/", name); }

  // The cubectl binary: $CUBECTL_BINARY (e.g. a sanitizer build), else the one built with this
  // test.
  static std::string Binary() {
    const char* binary = getenv("CUBECTL_BINARY");
    return binary != nullptr ? binary : CUBECTL_BINARY_PATH;
  }

  // `cubectl --address=<daemon>`, for a command line of its own.
  static std::string CubectlPrefix() {
    return absl::StrCat(Binary(), " --address=", daemon_->unix_address());
  }

  // Runs `command` through the shell; its stdout and stderr come back apart.
  static Result Shell(const std::string& command) {
    const std::string err_path = Path("stderr");
    Result r;
    FILE* pipe = popen(absl::StrCat(command, " 2>", err_path).c_str(), "r");
    if (pipe == nullptr) return r;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) r.out.append(buf, n);
    const int status = pclose(pipe);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.err = ReadFile(err_path);
    return r;
  }

  // Runs `cubectl --address=<daemon> <args>` through the shell.
  static Result Cubectl(const std::string& args) {
    return Shell(absl::StrCat(CubectlPrefix(), " ", args));
  }

  // Opens a session for one test; returns its id.
  static std::string OpenSession() {
    Result r = Cubectl("--json session open --lease=2m");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return JsonString(r.out, "session");
  }

  // Stores `npy_bytes` via `cubectl create`; returns the handle id.
  static std::string Create(const std::string& session, const std::string& name,
                            const std::string& npy_bytes) {
    WriteFile(Path(name), npy_bytes);
    Result r = Cubectl(absl::StrCat("--json --session=", session, " create ", Path(name)));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return JsonString(r.out, "handle");
  }

  // Runs `cubectl --json top ARGS` for one sample while this thread runs relu on `handle` of
  // `session` until top has printed, so that some kernels fall inside its interval however
  // slowly the processes start (sanitizer builds). Returns top's output.
  static std::string TopWhileRunning(const std::string& args, const std::string& session,
                                     const std::string& handle) {
    const std::string out = Path("top.out"), err = Path("top.err");
    const std::string command =
        absl::StrCat(CubectlPrefix(), " --json top ", args, " >", out, " 2>", err);
    int top_exit = -1;
    std::atomic<bool> top_done{false};
    std::thread top([&] {
      top_exit = system(command.c_str());
      top_done = true;
    });
    while (!top_done) {
      Result r = Cubectl(absl::StrCat("--session=", session, " run relu --dtype=f32 --in=", handle,
                                      ":2 --out=", handle, ":2"));
      EXPECT_EQ(r.exit_code, 0) << r.err;
    }
    top.join();
    EXPECT_EQ(top_exit, 0) << ReadFile(err);
    return ReadFile(out);
  }

  static testing::DaemonProcess* daemon_;
  static std::string* dir_;
};

testing::DaemonProcess* CubectlTest::daemon_ = nullptr;
std::string* CubectlTest::dir_ = nullptr;

TEST_F(CubectlTest, InfoShowsTheDeviceUnderTest) {
  Result r = Cubectl("info");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, MatchesRegex("(.|\n)*backend +" + testing::TestBackend() + "\n(.|\n)*"));
  EXPECT_THAT(r.out, MatchesRegex("(.|\n)*builtin_kernels +.*add.*\n(.|\n)*"));
  EXPECT_THAT(r.out, MatchesRegex("(.|\n)*elem_types +f32, f64, i32, u32, i64, f16, bf16, i8, u8, "
                                  "i16, u16, bool\n(.|\n)*"));
  EXPECT_THAT(r.out, HasSubstr("memory_limit"));
}

TEST_F(CubectlTest, InfoJsonIsOneObject) {
  Result r = Cubectl("--json info");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith("{\"version\": "));
  EXPECT_THAT(r.out, MatchesRegex("\\{[^\n]*\\}\n"));
  EXPECT_THAT(r.out, HasSubstr("\"backend\": \"" + testing::TestBackend() + "\""));
  EXPECT_THAT(r.out, MatchesRegex(".*\"builtin_kernels\": \\[[^]]*\"relu\".*"));
  EXPECT_THAT(r.out, MatchesRegex(".*\"memory_total\": [0-9]+,.*"));
}

TEST_F(CubectlTest, HealthIsServing) {
  Result r = Cubectl("health");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out,
              MatchesRegex("server +SERVING\ncubed.v1.Compute +SERVING\ndevice/0 +SERVING\n"));
  r = Cubectl("--json health");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "{\"server\": \"SERVING\", \"cubed.v1.Compute\": \"SERVING\", \"device/0\": "
            "\"SERVING\"}\n");
}

TEST_F(CubectlTest, UnreachableDaemonFailsWithUnavailable) {
  Result r = Cubectl("--address=unix:/nonexistent/cubed.sock --timeout=5s health");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, StartsWith("cubectl: UNAVAILABLE: "));
  r = Cubectl("--address=unix:/nonexistent/cubed.sock --timeout=5s info");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, StartsWith("cubectl: UNAVAILABLE: "));
}

TEST_F(CubectlTest, MemoryPrintsTheFourNumbersAndTheImportedMemory) {
  Result r = Cubectl("memory");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* key : {"number_allocs", "bytes_in_use", "bytes_padding", "bytes_reserved",
                          "imported_bytes", "imported_buffers"}) {
    EXPECT_THAT(r.out, MatchesRegex(absl::StrCat("(.|\n)*", key, " +[0-9](.|\n)*"))) << key;
  }
  r = Cubectl("--json memory");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, MatchesRegex("\\{\"number_allocs\": [0-9]+, \"bytes_in_use\": [0-9]+, "
                                  "\"bytes_padding\": [0-9]+, \"bytes_reserved\": [0-9]+, "
                                  "\"imported_bytes\": 0, \"imported_buffers\": 0\\}\n"));
}

TEST_F(CubectlTest, CreateRunReadAcrossInvocations) {
  const std::string session = OpenSession();
  ASSERT_THAT(session, MatchesRegex("[0-9]+"));
  const std::string s = absl::StrCat("--session=", session, " ");
  const std::string a = Create(session, "a.npy", NpyF32({-2, -1, 0, 1, 2, 3}, {2, 3}));
  const std::string b = Create(session, "b.npy", NpyF32({.5, .5, .5, .5, .5, .5}, {2, 3}));
  const std::string zeros = Create(session, "z.npy", NpyF32({0, 0, 0, 0, 0, 0}, {2, 3}));
  ASSERT_FALSE(a.empty() || b.empty() || zeros.empty());

  // add into a new output handle.
  Result r = Cubectl(absl::StrCat("--json ", s, "run add --dtype=f32 --in=", a, ":2x3 --in=", b,
                                  ":2,3 --out=new:2x3"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string sum = r.out.substr(r.out.find("\"outputs\": [\"") + 13);
  const std::string sum_id = sum.substr(0, sum.find('"'));
  r = Cubectl(absl::StrCat(s, "read ", sum_id, " --shape=2x3 --dtype=f32 --npy ", Path("sum.npy")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ReadFile(Path("sum.npy")), NpyF32({-1.5, -.5, .5, 1.5, 2.5, 3.5}, {2, 3}));

  // relu into an existing handle, then read it as raw bytes and as printed values.
  r = Cubectl(absl::StrCat(s, "run relu --dtype=f32 --in=", a, ":2x3 --out=", zeros, ":2x3"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = Cubectl(absl::StrCat(s, "read ", zeros, " -o ", Path("relu.raw")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string relu_npy = NpyF32({0, 0, 0, 1, 2, 3}, {2, 3});
  EXPECT_EQ(ReadFile(Path("relu.raw")), relu_npy.substr(relu_npy.size() - 24));
  r = Cubectl(absl::StrCat(s, "read ", zeros, " --dtype=f32"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("values  0 0 0 1 2 3\n"));

  // profile reports a duration.
  r = Cubectl(
      absl::StrCat("--json ", s, "profile relu --dtype=f32 --in=", a, ":6 --out=", zeros, ":6"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, MatchesRegex(".*\"duration_ns\": [0-9]+\\}\n"));

  r = Cubectl("cleanup");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("bytes_reserved"));

  r = Cubectl(absl::StrCat("--json session close ", session));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"handles_released\": 4"));
  r = Cubectl(absl::StrCat(s, "read ", a, " --dtype=f32"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, StartsWith("cubectl: NOT_FOUND: "));
}

TEST_F(CubectlTest, KernelsWithBoolAndIndexBuffersBindTheirTypes) {
  const std::string session = OpenSession();
  const std::string s = absl::StrCat("--session=", session, " ");
  const std::string a = Create(session, "a.npy", NpyF32({-2, -1, 0, 1, 2, 3}, {2, 3}));
  const std::string b = Create(session, "b.npy", NpyF32({.5, .5, .5, .5, .5, .5}, {2, 3}));
  const std::string rows = Create(session, "rows.npy", NpyF32({1, 0}, {2}));
  const auto output = [](const std::string& json) {
    const std::string rest = json.substr(json.find("\"outputs\": [\"") + 13);
    return rest.substr(0, rest.find('"'));
  };
  // a < b writes bool (one byte per element), then where takes it as its condition.
  Result r = Cubectl(absl::StrCat("--json ", s, "run lt --dtype=f32 --in=", a, ":2x3 --in=", b,
                                  ":2x3 --out=new:2x3"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string less = output(r.out);
  r = Cubectl(absl::StrCat(s, "read ", less, " --dtype=bool"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("values  true true true false false false\n"));
  r = Cubectl(absl::StrCat("--json ", s, "run where --dtype=f32 --in=", less, ":2x3 --in=", a,
                           ":2x3 --in=", b, ":2x3 --out=new:2x3"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = Cubectl(absl::StrCat(s, "read ", output(r.out), " --dtype=f32"));
  EXPECT_THAT(r.out, HasSubstr("values  -2 -1 0 0.5 0.5 0.5\n"));
  // gather with i32 indices (a cast of rows): the rows of a in the order 1, 0.
  r = Cubectl(absl::StrCat("--json ", s, "run cast --dtype=f32 --out-dtype=i32 --in=", rows,
                           ":2 --out=new:2"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string idx = output(r.out);
  r = Cubectl(absl::StrCat("--json ", s, "run gather --dtype=f32 --index-dtype=i32 --axis=0 --in=",
                           a, ":2x3 --in=", idx, ":2 --out=new:2x3"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = Cubectl(absl::StrCat(s, "read ", output(r.out), " --dtype=f32"));
  EXPECT_THAT(r.out, HasSubstr("values  1 2 3 -2 -1 0\n"));
  r = Cubectl(absl::StrCat("--json session close ", session));
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST_F(CubectlTest, UnknownHandleIsNamed) {
  const std::string session = OpenSession();
  Result r = Cubectl(absl::StrCat("--session=", session, " read 987654321 --dtype=f32"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, StartsWith("cubectl: NOT_FOUND: "));
  EXPECT_THAT(r.err, HasSubstr("987654321"));
  r = Cubectl(
      absl::StrCat("--session=", session, " run relu --dtype=f32 --in=987654321:2 --out=new:2"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("987654321"));
  Cubectl(absl::StrCat("session close ", session));
}

TEST_F(CubectlTest, BadNpyIsRejectedBeforeTheDaemon) {
  std::string fortran = NpyF32({1, 2, 3, 4}, {2, 2});
  fortran.replace(fortran.find("False"), 5, "True ");
  WriteFile(Path("fortran.npy"), fortran);
  Result r = Cubectl(absl::StrCat("--session=1 create ", Path("fortran.npy")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("Fortran"));
}

TEST_F(CubectlTest, UsageErrorsExitTwo) {
  for (const char* args :
       {"", "frobnicate", "info --bogus=1", "--timeout=soon info", "create x.npy",
        "--session=1 run add --in=1:2x3", "--session=1 run relu --dtype=f99 --in=1:2 --out=new:2",
        "--session=1 run relu --dtype=f32 --in=1:2x0 --out=new:2"}) {
    Result r = Cubectl(args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.err;
    EXPECT_THAT(r.err, StartsWith("cubectl: ")) << args;
    EXPECT_THAT(r.err, Not(HasSubstr("INTERNAL"))) << args;
  }
}

TEST_F(CubectlTest, ParseErrorsNameWhatIsWrong) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "cubectl: no command given\n"},
      {"frobnicate", "cubectl: unknown command 'frobnicate'\n"},
      {"session", "cubectl: unknown command 'session'\n"},
      {"session frob", "cubectl: unknown command 'session frob'\n"},
      {"info --bogus=1", "cubectl: unknown flag --bogus for this command\n"},
      {"info --lease=1m", "cubectl: unknown flag --lease for this command\n"},
      {"session open --lease", "cubectl: flag --lease needs a value\n"},
      {"info extra", "cubectl: info: unexpected argument 'extra'\n"},
      {"info health", "cubectl: one command at a time: 'info' and 'health'\n"},
      {"--session=1 run add --in=1:2x3", "cubectl: usage: cubectl --session=ID run KERNEL"},
  };
  for (const auto& [args, message] : cases) {
    Result r = Cubectl(args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.err;
    EXPECT_THAT(r.err, StartsWith(message)) << args;
    EXPECT_THAT(r.err, HasSubstr("run 'cubectl --help' for usage\n")) << args;
  }
}

TEST_F(CubectlTest, GlobalFlagsGoBeforeOrAfterTheCommand) {
  Result before = Cubectl("--json memory");
  Result after = Cubectl("memory --json");
  ASSERT_EQ(before.exit_code, 0) << before.err;
  ASSERT_EQ(after.exit_code, 0) << after.err;
  EXPECT_THAT(after.out, StartsWith("{\"number_allocs\": "));
  // Repeated flags keep every value (run's --in) and the last one of the others.
  const std::string session = OpenSession();
  const std::string a = Create(session, "ga.npy", NpyF32({1, 2}, {2}));
  Result r = Cubectl(absl::StrCat("run add --in ", a, ":2 --dtype=f64 --session ", session,
                                  " --dtype f32 --in=", a, ":2 --out=new:2 --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = Cubectl(absl::StrCat("read ",
                           r.out.substr(r.out.find("\"outputs\": [\"") + 13,
                                        r.out.find("\"]") - r.out.find("\"outputs\": [\"") - 13),
                           " --dtype=f32 --session=", session));
  EXPECT_THAT(r.out, HasSubstr("values  2 4\n")) << r.err;
  r = Cubectl("--help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, AllOf(StartsWith("usage: cubectl"), HasSubstr("completion bash|zsh")));
  EXPECT_EQ(Cubectl("run -h").out, r.out);
  Cubectl(absl::StrCat("session close ", session));
}

TEST_F(CubectlTest, BashCompletionCompletesCommandsFlagsAndValues) {
  // As bash calls it: COMP_LINE up to COMP_POINT; `cubectl` a function running this binary.
  WriteFile(Path("complete.sh"),
            absl::StrCat("source <(", Binary(), " completion bash) || exit 3\n",
                         "complete -p cubectl\n"
                         "cubectl() { ",
                         Binary(),
                         " \"$@\"; }\n"
                         "line() { COMP_LINE=$1; COMP_POINT=${#1}; _cubectl;\n"
                         "  echo \"${COMPREPLY[*]}\"; }\n"
                         "line 'cubectl ses'\n"
                         "line 'cubectl session '\n"
                         "line 'cubectl --json rea'\n"
                         "line 'cubectl --address unix:/x run --dt'\n"
                         "line 'cubectl run --dtype=b'\n"
                         "line 'cubectl read 5 --dtype f1'\n"
                         "line 'cubectl --session 5 create --sh'\n"
                         "line 'cubectl completion '\n"
                         "line 'cubectl info --t'\n"
                         "line 'cubectl --address=",
                         daemon_->unix_address(), " --session=5 run gelu_'\n",
                         "line 'cubectl --address /nonexistent run gelu_'\n"));
  const Result r = Shell(absl::StrCat("bash -c '. ", Path("complete.sh"), "'"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out,
            "complete -F _cubectl cubectl\n"
            "session\n"
            "open close\n"
            "read\n"
            "--dtype\n"
            "bf16 bool\n"
            "f16\n"
            "--shape\n"
            "bash zsh\n"
            "--timeout --tls_ca --tls_cert --tls_key --token_file\n"
            "gelu_tanh\n"
            "\n");
  Result zsh = Cubectl("completion zsh");
  EXPECT_EQ(zsh.exit_code, 0) << zsh.err;
  EXPECT_THAT(zsh.out, AllOf(HasSubstr("bashcompinit"), HasSubstr("complete -F _cubectl cubectl")));
  EXPECT_EQ(Cubectl("completion fish").exit_code, 2);
}

TEST_F(CubectlTest, ProgressLineOnlyOnATerminalAndNotWithQuiet) {
  const std::string session = OpenSession();
  const std::string s = absl::StrCat("--session=", session, " ");
  std::string big(8 << 20, '\0');
  for (size_t i = 0; i < big.size(); i += 4096) big[i] = static_cast<char>(i / 4096);
  WriteFile(Path("big.raw"), big);
  // Piped (as in every other test): nothing on stderr.
  Result r = Cubectl(absl::StrCat("--json ", s, "create ", Path("big.raw")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const std::string handle = JsonString(r.out, "handle");
  r = Cubectl(absl::StrCat(s, "read ", handle, " -o ", Path("piped.raw")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_TRUE(ReadFile(Path("piped.raw")) == big);
  if (system("script --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "no script(1) for a pty";
  // On a terminal (script(1) gives cubectl a pty): a bar that reaches 100%, then the report.
  const auto on_tty = [&](const std::string& args) {
    return Shell(
        absl::StrCat("script -qec '", CubectlPrefix(), " ", s, args, "' /dev/null </dev/null"));
  };
  r = on_tty(absl::StrCat("read ", handle, " -o ", Path("tty.raw")));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, AllOf(HasSubstr("\r\033[Kread  [#"), HasSubstr("] 100%  8.00 MiB / 8.00 MiB"),
                           HasSubstr("\r\033[Khandle")));
  EXPECT_TRUE(ReadFile(Path("tty.raw")) == big);
  r = on_tty(absl::StrCat("create ", Path("big.raw")));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("\r\033[Kcreate  8.00 MiB  0."));
  r = on_tty(absl::StrCat("--quiet read ", handle, " -o ", Path("quiet.raw")));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, AllOf(HasSubstr("handle"), Not(HasSubstr("%"))));
  EXPECT_TRUE(ReadFile(Path("quiet.raw")) == big);
  Cubectl(absl::StrCat("session close ", session));
}

TEST_F(CubectlTest, TopCountsTheKernelsRunMeanwhile) {
  Result r = Cubectl("top --count=2 --interval=50ms");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, MatchesRegex("# time +dev +sessions +handles +queued +in_use +reserved +limit "
                                  "+imported +kernels/s +cmds/s +in/s +out/s\n"
                                  "([0-9:]{8} +0 +[0-9]+ +[0-9]+ .*\n){2}"));
  // One sample over 3 s while this thread runs kernels: a rate above zero.
  const std::string session = OpenSession();
  const std::string a = Create(session, "top.npy", NpyF32({-1, 1}, {2}));
  const std::string json = TopWhileRunning("--count=1 --interval=3s", session, a);
  EXPECT_THAT(json,
              MatchesRegex("\\{\"time\": \"[0-9-]+T[0-9:]+\\.[0-9]{3}Z\", \"interval_ns\": [0-9]+, "
                           "\"kernels_per_s\": [0-9.]+, .*\"devices\": \\[\\{\"device\": 0, "
                           "\"sessions\": [1-9][0-9]*, .*\\}\\]\\}\n"));
  const size_t at = json.find("\"kernels_per_s\": ") + 17;
  EXPECT_GT(std::stod(json.substr(at)), 0) << json;
  EXPECT_EQ(Cubectl("top --interval=0s").exit_code, 2);
  Cubectl(absl::StrCat("session close ", session));
}

TEST_F(CubectlTest, TopSessionsCountsEachSessionsOwnKernels) {
  // Two sessions; kernels run in one only while top samples: that session's rate is above zero,
  // the other's is zero, and both are listed with their handles and principal (a Unix-socket
  // peer without --auth_config is "local").
  const std::string busy = OpenSession();
  const std::string idle = OpenSession();
  const std::string a = Create(busy, "busy.npy", NpyF32({-1, 1}, {2}));
  Create(idle, "idle1.npy", NpyF32({1}, {1}));
  Create(idle, "idle2.npy", NpyF32({2}, {1}));
  const std::string json = TopWhileRunning("--sessions --count=1 --interval=2s", busy, a);
  // Sessions by serial: `busy` opened first, so it comes first.
  auto entry = [](int handles, int bytes) {
    return absl::StrCat("\\{\"serial\": [0-9]+, \"principal\": \"local\", \"handles\": ", handles,
                        ", \"bytes\": ", bytes,
                        ", \"imported_bytes\": 0, \"kernels\": [0-9]+, \"kernels_per_s\": [0-9.]+, "
                        "\"age_ns\": [0-9]+\\}");
  };
  const std::string busy_entry = entry(1, 8);
  const std::string idle_entry = entry(2, 8);
  EXPECT_THAT(json, ::testing::ContainsRegex(
                        absl::StrCat("\"session_list\": \\[", busy_entry, ", ", idle_entry, "\\]")))
      << json;
  const size_t busy_at = json.find("\"kernels_per_s\": ", json.find("\"session_list\""));
  ASSERT_NE(busy_at, std::string::npos) << json;
  EXPECT_GT(std::stod(json.substr(busy_at + 17)), 0) << json;
  const size_t idle_at = json.find("\"kernels_per_s\": ", busy_at + 1);
  ASSERT_NE(idle_at, std::string::npos) << json;
  EXPECT_EQ(std::stod(json.substr(idle_at + 17)), 0) << json;
  // The table: a line per session under the device's, the busy one's rate above zero.
  Result r = Cubectl("top --sessions --count=1 --interval=50ms");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::ContainsRegex(
                         "\n +#[0-9]+ +1 +8 B +0 B +[0-9.]+  local\n +#[0-9]+ +2 +8 B +"
                         "0 B +0\\.0  local\n"))
      << r.out;
  Cubectl(absl::StrCat("session close ", busy));
  Cubectl(absl::StrCat("session close ", idle));
}

TEST_F(CubectlTest, TraceRecordsWhatTheSessionRunsAsChromeJson) {
  const std::string session = OpenSession();
  const std::string trace_path = Path("trace.json");
  // The trace runs in the background for 3 s while this thread creates two tensors in the
  // session; its stdout and stderr go to files of their own.
  const char* binary = getenv("CUBECTL_BINARY");
  const std::string command = absl::StrCat(
      binary != nullptr ? binary : CUBECTL_BINARY_PATH, " --address=", daemon_->unix_address(),
      " --json --session=", session, " trace --for=3s --max-events=1 -o ", trace_path, " >",
      Path("trace.out"), " 2>", Path("trace.err"));
  int trace_exit = -1;
  std::thread tracer([&] { trace_exit = system(command.c_str()); });
  absl::SleepFor(absl::Seconds(1));
  Create(session, "t1.npy", NpyF32({1, 2, 3}, {3}));
  Create(session, "t2.npy", NpyF32({4, 5}, {2}));
  tracer.join();
  ASSERT_EQ(trace_exit, 0) << ReadFile(Path("trace.err"));
  EXPECT_THAT(ReadFile(Path("trace.out")),
              AllOf(HasSubstr("\"events\": 1"), HasSubstr("\"dropped\": 1")));
  const std::string json = ReadFile(trace_path);
  EXPECT_THAT(json,
              AllOf(HasSubstr("{\"traceEvents\":[{\"name\":\"process_name\",\"ph\":\"M\""),
                    HasSubstr("\"name\":\"create\",\"cat\":\"memory\",\"ph\":\"X\",\"ts\":0.000"),
                    HasSubstr("\"args\":{\"bytes\":"), HasSubstr("\"dropped\":1")));
  // Without --session it is a usage error; a session that does not exist is NOT_FOUND.
  EXPECT_EQ(Cubectl("trace --for=1ms").exit_code, 2);
  Result r = Cubectl("--session=12345 trace --for=1ms");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("NOT_FOUND"));
}

}  // namespace
}  // namespace cubed::cubectl
