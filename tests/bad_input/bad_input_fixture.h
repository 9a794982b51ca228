#pragma once

// Bad input against the real daemon: one TEST per row of docs/error-model.md. Each sends one
// malformed, unknown, over-limit or not-now request through the generated stub and checks what a
// client sees: the status code, a message naming the problem, MemoryUsage (all four numbers)
// unchanged by the failed request, and the session still usable afterwards.
//
// This header holds what the suite's files share: the status checks, a session stream, and the
// BadInputTest fixture with its daemon. The rows live in bad_input_handles_test.cc,
// bad_input_kernels_test.cc and bad_input_stream_test.cc.

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "cubed/v1/compute.grpc.pb.h"
#include "cubed/v1/session.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/testing/daemon_process.h"

namespace cubed::bad_input {

inline constexpr uint64_t kMiB = uint64_t{1} << 20;

// The smallest client id of the session stream (2^63): stream commands name their buffers with ids
// from here up; the daemon's own ids never reach it.
inline constexpr uint64_t kFirstClientId = uint64_t{1} << 63;

// The name of a gRPC status code ("NOT_FOUND"), or "code N" for one outside the enum.
std::string CodeName(grpc::StatusCode code);

// "CODE: message" of a status, for failure messages.
std::string Describe(const grpc::Status& s);

// The status has `code` and its message contains every word of `words` (case-insensitive).
// On success prints the message, the wording docs/error-model.md quotes.
::testing::AssertionResult Fails(const grpc::Status& s, grpc::StatusCode code,
                                 std::vector<std::string> words);

// A new client context with a 30-second deadline; the caller owns it.
std::unique_ptr<grpc::ClientContext> Context();

// A reply's code and message as a status, for Fails().
grpc::Status StatusOf(const v1::Reply& reply);

// One session stream (cubed.v1.SessionStream/Session), for the rows about stream commands. Opens
// the stream on construction (see opened()); the destructor half-closes it, drains what is left
// and finishes it. `stub` must outlive the Stream. Used by one test thread.
class Stream {
 public:
  explicit Stream(v1::SessionStream::Stub& stub);
  ~Stream();

  // Whether the open request was answered with `opened`.
  bool opened() const { return opened_; }

  // Sends `commands` as one request; false when the stream is broken.
  bool Send(std::vector<v1::Command> commands);
  // The next reply; code -1 when the stream ended instead.
  v1::Reply Next();

  // A create of `data` under the client id `id`.
  static v1::Command Create(uint64_t seq, uint64_t id, const std::string& data);
  // A read of the whole of `id`.
  static v1::Command Read(uint64_t seq, uint64_t id);
  // One release of each of `ids`.
  static v1::Command Release(uint64_t seq, std::vector<uint64_t> ids);
  // A sync: its reply counts the commands that failed since the last one.
  static v1::Command Sync(uint64_t seq);

 private:
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionResponse>> rw_;
  std::deque<v1::Reply> replies_;
  bool opened_ = false;
};

// One daemon (--memory_limit=64MiB) per test program, reached over its Unix socket through the
// unary stub `stub_` and the stream stub `stream_stub_`; the suite owns all three. Each test gets
// its own open session `session_`, which TearDown checks still works and then closes. The helpers
// that call the daemon add a test failure (not fatal) when the call fails.
class BadInputTest : public ::testing::Test {
 protected:
  // One daemon per test program; ctest runs every TEST as its own program.
  static void SetUpTestSuite();
  static void TearDownTestSuite();

  // Opens `session_`.
  void SetUp() override;
  // Checks the session still works: create, read back, release, close.
  void TearDown() override;

  // Opens a new session; 0 when that failed. The caller closes it.
  uint64_t OpenSession();
  void CloseSession(uint64_t session);
  // A new buffer holding `bytes` in `session`; 0 when that failed.
  uint64_t Create(uint64_t session, const std::string& bytes);
  // A new buffer of `size` bytes in `session`; 0 when that failed.
  uint64_t Empty(uint64_t session, uint64_t size);
  // Releases each of `handles` once.
  void Release(uint64_t session, const std::vector<uint64_t>& handles);
  // The whole of `handle` of `session_`; empty when the read failed.
  std::string ReadAll(uint64_t handle);
  // The daemon's MemoryUsage now.
  v1::MemoryUsage Usage();

  // Remembers MemoryUsage now; ExpectUsageUnchanged compares all four numbers with it.
  void SnapshotUsage();
  void ExpectUsageUnchanged();

  // A valid `add` of two f32 vectors of 4 into a third, in this session. The kernel tests
  // (bad_input_kernels_test.cc) first check that it runs, then break exactly one thing.
  v1::ExecuteRequest ValidAdd();
  // Sends `req` to Execute and returns its status.
  grpc::Status Execute(const v1::ExecuteRequest& req);
  // Runs the valid add and checks its output: the launch path works before the broken one.
  void ExpectValidAddRuns();
  // The bytes of `v` as they lie in memory.
  static std::string Floats(std::vector<float> v);

  static ::cubed::testing::DaemonProcess* daemon_;
  static v1::Compute::Stub* stub_;
  static v1::SessionStream::Stub* stream_stub_;
  uint64_t session_ = 0;
  v1::MemoryUsage before_;
  std::vector<uint64_t> add_buffers_;  // ValidAdd's a, b and output, created on first use.
};

}  // namespace cubed::bad_input
