// The C++ SDK across a daemon restart with checkpoint and restore (Note [Stream resume],
// client/stream_transport.h): a client with ClientOptions::resume_timeout running a loop of
// kernels on the session stream while its daemon drains on SIGTERM and a new one restores the
// session on the same socket ends with the same bytes as without a restart; when the new daemon
// did not restore the session, the client's next calls fail clearly.

#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "tests/testing/daemon_process.h"
#include "tests/testing/temp_dir.h"

namespace {

using ::cubed::Builtin;
using ::cubed::Client;
using ::cubed::ClientOptions;
using ::cubed::ElemType;
using ::cubed::Tensor;
using ::cubed::testing::DaemonProcess;
using ::cubed::testing::TempDir;

constexpr uint64_t kN = 256;

std::unique_ptr<DaemonProcess> StartDaemon(std::vector<std::string> flags,
                                           const std::string& socket = "") {
  DaemonProcess::Options options;
  options.flags = std::move(flags);
  options.socket = socket;
  absl::StatusOr<std::unique_ptr<DaemonProcess>> d = DaemonProcess::Start(options);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *std::move(d) : nullptr;
}

std::unique_ptr<Client> Connect(const std::string& address) {
  ClientOptions options;
  options.address = address;
  options.timeout = absl::Seconds(30);
  options.transport = cubed::Transport::kStream;
  options.resume_timeout = absl::Seconds(20);
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

std::vector<uint8_t> Floats(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(float));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

TEST(SdkResumeTest, KernelLoopCarriesOnAcrossACheckpointedRestart) {
  TempDir tmp("cubed-resume");
  const std::string dir = tmp.path() + "/checkpoint";
  std::unique_ptr<DaemonProcess> a = StartDaemon({"--checkpoint_dir=" + dir});
  ASSERT_NE(a, nullptr);
  const std::string address = a->unix_address();
  std::unique_ptr<DaemonProcess> b;
  std::unique_ptr<Client> client = Connect(address);
  ASSERT_NE(client, nullptr);
  const uint64_t session = client->session();

  std::vector<float> want(kN);
  for (uint64_t i = 0; i < kN; ++i) want[i] = static_cast<float>(i) / 7.0f;
  const std::vector<uint8_t> x0 = Floats(want);
  absl::StatusOr<Tensor> x = client->CreateTensor(x0, {kN}, 4);
  ASSERT_TRUE(x.ok()) << x.status();
  absl::StatusOr<Tensor> one = client->CreateTensor(Floats(std::vector<float>(kN, 0.25f)), {kN}, 4);
  ASSERT_TRUE(one.ok()) << one.status();
  constexpr int kSteps = 20;
  absl::Time restored;
  for (int step = 0; step < kSteps; ++step) {
    if (step == kSteps / 2) {
      // Releases of the tensors dropped so far go out first: a batched release written after
      // the drain began would (rightly) be reported lost by the Sync after the restart.
      ASSERT_TRUE(client->FlushReleases().ok());
      ASSERT_TRUE(client->Sync().get().ok());
      absl::StatusOr<int> code = a->Stop(SIGTERM);
      ASSERT_TRUE(code.ok()) << code.status();
      ASSERT_EQ(*code, 0) << a->LogTail();
      b = StartDaemon({"--restore=" + dir}, address.substr(5));
      ASSERT_NE(b, nullptr);
      restored = absl::Now();
    }
    absl::StatusOr<Tensor> next = client->EmptyTensor({kN}, 4);
    ASSERT_TRUE(next.ok()) << "step " << step << ": " << next.status();
    if (step == kSteps / 2) {
      // The stream resumed promptly once the new daemon served (not after gRPC's backoff).
      EXPECT_LT(absl::Now() - restored, absl::Seconds(2));
    }
    ASSERT_TRUE(client->Execute(Builtin("add", ElemType::kF32), {*x, *one}, {*next}).ok());
    x = next;
    for (float& v : want) v += 0.25f;
  }
  absl::Status synced = client->Sync().get();
  EXPECT_TRUE(synced.ok()) << synced;
  absl::StatusOr<std::vector<std::string>> got = client->ReadTensor({*x}).get();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 1u);
  const std::vector<uint8_t> bytes = Floats(want);
  EXPECT_EQ((*got)[0], std::string(bytes.begin(), bytes.end()));
  EXPECT_EQ(client->session(), session);
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(absl::StrContains(b->Log(), "restored 1 sessions")) << b->LogTail();
}

TEST(SdkResumeTest, CommandsCutByTheRestartAreReportedNotLost) {
  // 1000 adds of 1 Mi floats, ping-pong between two buffers, queued without waiting; the daemon
  // drains in the middle of them. Whatever ran is in the checkpoint, whatever was written after
  // it did not run, and then (and only then) the next Sync says so: the result is short of the
  // full count exactly when Sync reports lost commands.
  constexpr uint64_t kBig = uint64_t{1} << 20;
  constexpr int kAdds = 1000;
  TempDir tmp("cubed-resume");
  const std::string dir = tmp.path() + "/checkpoint";
  std::unique_ptr<DaemonProcess> a = StartDaemon({"--checkpoint_dir=" + dir});
  ASSERT_NE(a, nullptr);
  const std::string address = a->unix_address();
  std::unique_ptr<Client> client = Connect(address);
  ASSERT_NE(client, nullptr);
  absl::StatusOr<Tensor> x =
      client->CreateTensor(Floats(std::vector<float>(kBig, 0.0f)), {kBig}, 4);
  absl::StatusOr<Tensor> y =
      client->CreateTensor(Floats(std::vector<float>(kBig, 0.0f)), {kBig}, 4);
  absl::StatusOr<Tensor> one =
      client->CreateTensor(Floats(std::vector<float>(kBig, 1.0f)), {kBig}, 4);
  ASSERT_TRUE(x.ok() && y.ok() && one.ok());
  ASSERT_TRUE(client->Sync().get().ok());
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(300));
    EXPECT_EQ(*a->Stop(SIGTERM), 0);
  });
  for (int i = 0; i < kAdds; ++i) {
    const Tensor& in = i % 2 == 0 ? *x : *y;
    const Tensor& out = i % 2 == 0 ? *y : *x;
    ASSERT_TRUE(client->Execute(Builtin("add", ElemType::kF32), {in, *one}, {out}).ok());
  }
  stopper.join();
  std::unique_ptr<DaemonProcess> b = StartDaemon({"--restore=" + dir}, address.substr(5));
  ASSERT_NE(b, nullptr);
  const absl::Status synced = client->Sync().get();
  absl::StatusOr<std::vector<std::string>> got = client->ReadTensor({*x, *y}).get();
  ASSERT_TRUE(got.ok()) << got.status();
  float top = 0;
  for (const std::string& bytes : *got) {
    float first;
    std::memcpy(&first, bytes.data(), sizeof(first));
    top = std::max(top, first);
  }
  if (synced.ok()) {
    EXPECT_EQ(top, static_cast<float>(kAdds));
  } else {
    EXPECT_EQ(synced.code(), absl::StatusCode::kUnavailable) << synced;
    EXPECT_TRUE(absl::StrContains(synced.message(), "did not run")) << synced;
    EXPECT_LT(top, static_cast<float>(kAdds));
    // Exactly the adds missing from the result are the ones named: none vanished unreported.
    unsigned long long first = 0, last = 0;
    const std::string message(synced.message());
    ASSERT_EQ(std::sscanf(message.c_str(), "commands %llu .. %llu", &first, &last), 2) << message;
    EXPECT_EQ(static_cast<float>(last - first + 1), static_cast<float>(kAdds) - top) << message;
  }
  std::fprintf(stderr, "adds applied: %g of %d; sync: %s\n", top, kAdds, synced.ToString().c_str());
}

TEST(SdkResumeTest, ARestartWithoutTheSessionFailsClearly) {
  std::unique_ptr<DaemonProcess> a = StartDaemon({});
  ASSERT_NE(a, nullptr);
  const std::string address = a->unix_address();
  std::unique_ptr<Client> client = Connect(address);
  ASSERT_NE(client, nullptr);
  absl::StatusOr<Tensor> x = client->CreateTensor(Floats(std::vector<float>(kN, 1.0f)), {kN}, 4);
  ASSERT_TRUE(x.ok()) << x.status();
  ASSERT_TRUE(client->Sync().get().ok());
  ASSERT_TRUE(a->Stop(SIGTERM).ok());
  std::unique_ptr<DaemonProcess> b = StartDaemon({}, address.substr(5));  // No --restore.
  ASSERT_NE(b, nullptr);
  absl::Status s = client->Sync().get();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "lost")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "resuming the session")) << s;
}

}  // namespace
