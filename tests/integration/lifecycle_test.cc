// The daemon's life around its clients: leases of killed client processes, SIGTERM with clients
// connected, and the TCP listener.

#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <thread>

#include "tests/integration/child_client.h"
#include "tests/integration/integration_test.h"

namespace cubed::integration {
namespace {

std::unique_ptr<Client> ConnectTo(const std::string& address, absl::Duration lease) {
  ClientOptions options;
  options.address = address;
  options.timeout = absl::Seconds(20);
  options.lease = lease;
  auto client = Client::Connect(options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

std::unique_ptr<testing::DaemonProcess> StartOrFail(std::vector<std::string> flags,
                                                    bool tcp = false) {
  testing::DaemonProcess::Options options;
  options.flags = std::move(flags);
  options.tcp = tcp;
  auto d = testing::DaemonProcess::Start(std::move(options));
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? std::move(*d) : nullptr;
}

TEST(LifecycleTest, KilledClientProcessLeavesNoMemoryOnceItsLeaseEnds) {
  auto daemon = StartOrFail({"--session_lease=1s"});
  ASSERT_NE(daemon, nullptr);
  // The observer only asks for memory usage, which names no session.
  auto observer = ConnectTo(daemon->unix_address(), absl::Minutes(1));
  ASSERT_NE(observer, nullptr);
  auto before = observer->GetMemoryUsage();
  ASSERT_TRUE(before.ok()) << before.status();

  constexpr uint64_t kBytes = 16 << 20;
  auto child = StartChildClient(daemon->unix_address(), kBytes, absl::Seconds(20));
  ASSERT_TRUE(child.ok()) << child.status() << "\ndaemon log:\n" << daemon->Log();
  auto during = observer->GetMemoryUsage();
  ASSERT_TRUE(during.ok());
  EXPECT_EQ(during->bytes_in_use, before->bytes_in_use + kBytes);
  EXPECT_EQ(during->number_allocs, before->number_allocs + 1);

  ASSERT_EQ(kill(*child, SIGKILL), 0);
  ASSERT_EQ(waitpid(*child, nullptr, 0), *child);
  const absl::Time killed = absl::Now();

  MemoryUsage now;
  while (absl::Now() - killed < absl::Seconds(10)) {
    auto u = observer->GetMemoryUsage();
    ASSERT_TRUE(u.ok()) << u.status();
    now = *u;
    if (now.bytes_in_use == before->bytes_in_use) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(now.bytes_in_use, before->bytes_in_use)
      << "the killed client's 16 MiB are still in use 10 s after a 1 s lease";
  EXPECT_EQ(now.number_allocs, before->number_allocs);
}

TEST(LifecycleTest, IdleSessionExpiresAfterItsLease) {
  auto daemon = StartOrFail({});
  ASSERT_NE(daemon, nullptr);
  auto client = ConnectTo(daemon->unix_address(), absl::Milliseconds(300));
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->lease(), absl::Milliseconds(300));
  auto h = client->Empty(1024);
  ASSERT_TRUE(h.ok()) << h.status();
  h->Detach();  // The session is going away; nothing to release.
  absl::SleepFor(absl::Seconds(2));
  auto again = client->Empty(1024);
  // On the session stream the failure arrives at the next sync.
  const absl::Status s = again.ok() ? client->Sync().get() : again.status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
}

TEST(LifecycleTest, SigtermWithClientsConnectedExitsCleanly) {
  auto daemon = StartOrFail({});
  ASSERT_NE(daemon, nullptr);
  auto a = ConnectTo(daemon->unix_address(), absl::ZeroDuration());
  auto b = ConnectTo(daemon->unix_address(), absl::ZeroDuration());
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  auto h = a->Create(ToBytes(std::vector<uint8_t>(1 << 20, 1)));
  ASSERT_TRUE(h.ok());

  // One client keeps the daemon busy while it shuts down: every call either succeeds or is
  // UNAVAILABLE, and none hangs past its deadline.
  std::atomic<bool> stop{false};
  std::atomic<int> unexpected{0};
  std::string last_unexpected;
  std::thread busy([&] {
    while (!stop.load()) {
      auto r = b->Empty(4096);
      if (!r.ok() && r.status().code() != absl::StatusCode::kUnavailable) {
        ++unexpected;
        last_unexpected = r.status().ToString();
      }
      if (!r.ok()) break;
    }
  });
  absl::SleepFor(absl::Milliseconds(100));
  auto code = daemon->Stop(SIGTERM, absl::Seconds(15));
  stop = true;
  busy.join();
  ASSERT_TRUE(code.ok()) << code.status() << "\ndaemon log:\n" << daemon->Log();
  EXPECT_EQ(*code, 0) << "daemon log:\n" << daemon->Log();
  EXPECT_EQ(unexpected.load(), 0) << last_unexpected;

  auto after = a->Read({*h}).get();
  EXPECT_EQ(after.status().code(), absl::StatusCode::kUnavailable) << after.status();
}

TEST(LifecycleTest, TcpListenerServesTheSameDaemon) {
  auto daemon = StartOrFail({}, /*tcp=*/true);
  ASSERT_NE(daemon, nullptr);
  ASSERT_FALSE(daemon->tcp_address().empty()) << "no tcp= line in the ready file";
  auto tcp = ConnectTo(daemon->tcp_address(), absl::ZeroDuration());
  auto unix_client = ConnectTo(daemon->unix_address(), absl::ZeroDuration());
  ASSERT_NE(tcp, nullptr);
  ASSERT_NE(unix_client, nullptr);

  std::mt19937_64 rng(7);
  std::string data = RandomBytes(rng, (1 << 20) + 5);
  auto h = tcp->Create(AsSpan(data));
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(ReadOrDie(*tcp, *h), data);
  auto info = tcp->GetInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->device.backend(), testing::TestBackendWire());
  // One device behind both listeners: the Unix client sees the TCP client's allocation.
  auto usage = unix_client->GetMemoryUsage();
  ASSERT_TRUE(usage.ok());
  EXPECT_GE(usage->bytes_in_use, data.size());
}

}  // namespace
}  // namespace cubed::integration
