// The daemon under a service manager, without one: a NOTIFY_SOCKET created here stands in for
// systemd. READY=1 only once the socket answers, STOPPING=1 on SIGTERM, WATCHDOG=1 at half the
// WATCHDOG_USEC interval while every device loop runs, none once a loop is wedged (the test-only
// CUBED_TEST_WEDGE_FILE switch), and health following the same truth.

#include <grpcpp/grpcpp.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "server/daemon/systemd_notify.h"
#include "tests/testing/daemon_process.h"

namespace cubed {
namespace {

using ::cubed::testing::DaemonProcess;
using ::grpc::health::v1::Health;
using ::grpc::health::v1::HealthCheckRequest;
using ::grpc::health::v1::HealthCheckResponse;

// What systemd does: a datagram socket the daemon sends its state to.
class NotifySocket {
 public:
  // A socket file in a fresh directory, or (abstract) a name in the abstract namespace.
  explicit NotifySocket(bool abstract) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    socklen_t length;
    if (abstract) {
      address_ = absl::StrCat("@cubed-notify-test-", getpid(), "-", absl::ToUnixNanos(absl::Now()));
      std::memcpy(addr.sun_path, address_.data(), address_.size());
      addr.sun_path[0] = '\0';
      length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + address_.size());
    } else {
      char dir[] = "/tmp/cubed-notify-XXXXXX";
      EXPECT_NE(mkdtemp(dir), nullptr);
      dir_ = dir;
      address_ = dir_ + "/notify";
      std::memcpy(addr.sun_path, address_.data(), address_.size());
      length = sizeof(addr);
    }
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), length), 0) << address_;
  }
  ~NotifySocket() {
    close(fd_);
    if (!dir_.empty()) {
      unlink(address_.c_str());
      rmdir(dir_.c_str());
    }
  }

  // The value for $NOTIFY_SOCKET.
  const std::string& address() const { return address_; }

  // The next message, or nullopt when none arrives within `timeout`.
  std::optional<std::string> Receive(absl::Duration timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) != 1) return std::nullopt;
    char buffer[4096];
    const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
    if (n < 0) return std::nullopt;
    return std::string(buffer, static_cast<size_t>(n));
  }
  // Waits up to `timeout` for a message containing the line `line`; returns it, or nullopt.
  // Messages received meanwhile are kept in `seen`.
  std::optional<std::string> WaitFor(absl::string_view line, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      std::optional<std::string> m = Receive(deadline - absl::Now());
      if (!m.has_value()) break;
      seen.push_back(*m);
      if (HasLine(*m, line)) return m;
    }
    return std::nullopt;
  }
  // The arrival times of every message with the line `line` during `duration`.
  std::vector<absl::Time> Collect(absl::string_view line, absl::Duration duration) {
    std::vector<absl::Time> times;
    const absl::Time deadline = absl::Now() + duration;
    for (absl::Time now = absl::Now(); now < deadline; now = absl::Now()) {
      std::optional<std::string> m = Receive(deadline - now);
      if (!m.has_value()) break;
      seen.push_back(*m);
      if (HasLine(*m, line)) times.push_back(absl::Now());
    }
    return times;
  }
  static bool HasLine(absl::string_view message, absl::string_view line) {
    for (absl::string_view l : absl::StrSplit(message, '\n')) {
      if (l == line) return true;
    }
    return false;
  }

  std::vector<std::string> seen;

 private:
  int fd_ = -1;
  std::string dir_;
  std::string address_;
};

// Sets environment variables for the daemons started while it lives (they inherit them).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

absl::StatusOr<HealthCheckResponse::ServingStatus> CheckHealth(const std::string& address) {
  auto stub = Health::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  HealthCheckRequest req;
  HealthCheckResponse resp;
  grpc::Status s = stub->Check(&ctx, req, &resp);
  if (!s.ok()) return absl::UnavailableError(s.error_message());
  return resp.status();
}

// Alive and not a zombie.
bool Running(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string contents((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = contents.rfind(')');
  return paren != std::string::npos && paren + 2 < contents.size() && contents[paren + 2] != 'Z';
}

TEST(WatchdogInterval, ParsedLikeSdWatchdogEnabled) {
  EXPECT_EQ(ParseWatchdogInterval("200000", nullptr, 42), absl::Milliseconds(200));
  EXPECT_EQ(ParseWatchdogInterval("200000", "", 42), absl::Milliseconds(200));
  EXPECT_EQ(ParseWatchdogInterval("200000", "42", 42), absl::Milliseconds(200));
  EXPECT_EQ(ParseWatchdogInterval("200000", "43", 42), std::nullopt);  // Meant for another.
  EXPECT_EQ(ParseWatchdogInterval(nullptr, nullptr, 42), std::nullopt);
  EXPECT_EQ(ParseWatchdogInterval("0", nullptr, 42), std::nullopt);
  EXPECT_EQ(ParseWatchdogInterval("-5", nullptr, 42), std::nullopt);
  EXPECT_EQ(ParseWatchdogInterval("12abc", nullptr, 42), std::nullopt);
  EXPECT_EQ(ParseWatchdogInterval("100", "x", 42), std::nullopt);
}

TEST(SystemdNotifier, WithoutSocketDropsMessages) {
  EXPECT_TRUE(SystemdNotifier("", std::nullopt).Notify("READY=1").ok());
  const absl::Status relative = SystemdNotifier("notify", std::nullopt).Notify("READY=1");
  EXPECT_EQ(relative.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(relative.message(), "NOTIFY_SOCKET='notify'")) << relative;
  const absl::Status missing =
      SystemdNotifier("/nonexistent/notify", std::nullopt).Notify("READY=1");
  EXPECT_EQ(missing.code(), absl::StatusCode::kFailedPrecondition) << missing;
}

TEST(SystemdNotify, ReadyOnlyOnceServingThenStoppingOnSigterm) {
  NotifySocket notify(/*abstract=*/false);
  ScopedEnv env("NOTIFY_SOCKET", notify.address());
  // On READY=1, ask the socket the STATUS= line names at once: it must already answer.
  std::optional<std::string> ready;
  absl::StatusOr<HealthCheckResponse::ServingStatus> health_at_ready =
      absl::UnknownError("no READY=1");
  std::thread listener([&] {
    ready = notify.WaitFor("READY=1", absl::Seconds(30));
    if (!ready.has_value()) return;
    for (absl::string_view line : absl::StrSplit(*ready, '\n')) {
      if (absl::ConsumePrefix(&line, "STATUS=serving on unix:")) {
        health_at_ready = CheckHealth(absl::StrCat("unix:", line));
      }
    }
  });
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start();
  listener.join();
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  ASSERT_TRUE(ready.has_value()) << (*daemon)->Log();
  EXPECT_TRUE(absl::StrContains(*ready, "STATUS=serving on " + (*daemon)->unix_address()))
      << *ready;
  ASSERT_TRUE(health_at_ready.ok()) << health_at_ready.status();
  EXPECT_EQ(*health_at_ready, HealthCheckResponse::SERVING);

  absl::StatusOr<int> code = (*daemon)->Stop(SIGTERM);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
  std::optional<std::string> stopping = notify.WaitFor("STOPPING=1", absl::Seconds(5));
  ASSERT_TRUE(stopping.has_value()) << (*daemon)->Log();
  // No watchdog was asked for, so none was sent.
  for (const std::string& m : notify.seen) {
    EXPECT_FALSE(NotifySocket::HasLine(m, "WATCHDOG=1")) << m;
  }
}

TEST(SystemdNotify, AbstractSocketAddress) {
  NotifySocket notify(/*abstract=*/true);
  ScopedEnv env("NOTIFY_SOCKET", notify.address());
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start();
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  EXPECT_TRUE(notify.WaitFor("READY=1", absl::Seconds(10)).has_value()) << (*daemon)->Log();
}

TEST(SystemdNotify, WatchdogPingsAtHalfTheInterval) {
  NotifySocket notify(/*abstract=*/false);
  ScopedEnv env("NOTIFY_SOCKET", notify.address());
  ScopedEnv usec("WATCHDOG_USEC", "200000");
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start();
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  ASSERT_TRUE(notify.WaitFor("READY=1", absl::Seconds(10)).has_value()) << (*daemon)->Log();
  const std::vector<absl::Time> pings = notify.Collect("WATCHDOG=1", absl::Milliseconds(1500));
  // Every 100 ms: about 15. A loaded CI machine may drift, but never toward systemd's limit.
  EXPECT_GE(pings.size(), 6u) << (*daemon)->Log();
  for (size_t i = 1; i < pings.size(); ++i) {
    EXPECT_LT(pings[i] - pings[i - 1], absl::Milliseconds(400)) << "gap before ping " << i;
  }
}

TEST(SystemdNotify, NoPingsWhenTheWatchdogIsForAnotherProcess) {
  NotifySocket notify(/*abstract=*/false);
  ScopedEnv env("NOTIFY_SOCKET", notify.address());
  ScopedEnv usec("WATCHDOG_USEC", "200000");
  ScopedEnv pid("WATCHDOG_PID", "1");
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start();
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  ASSERT_TRUE(notify.WaitFor("READY=1", absl::Seconds(10)).has_value()) << (*daemon)->Log();
  EXPECT_TRUE(notify.Collect("WATCHDOG=1", absl::Milliseconds(600)).empty());
}

TEST(SystemdNotify, WedgedLoopStopsPingsAndHealthUntilItRunsAgain) {
  NotifySocket notify(/*abstract=*/false);
  const std::string wedge = notify.address() + ".wedge";
  ScopedEnv env("NOTIFY_SOCKET", notify.address());
  ScopedEnv usec("WATCHDOG_USEC", "200000");
  ScopedEnv wedge_env("CUBED_TEST_WEDGE_FILE", wedge);
  DaemonProcess::Options options;
  options.flags = {"--loop_stall_timeout=300ms"};
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start(options);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  DaemonProcess& d = **daemon;
  ASSERT_TRUE(notify.WaitFor("READY=1", absl::Seconds(10)).has_value()) << d.Log();
  ASSERT_GE(notify.Collect("WATCHDOG=1", absl::Milliseconds(500)).size(), 2u) << d.Log();
  ASSERT_EQ(CheckHealth(d.unix_address()).value_or(HealthCheckResponse::UNKNOWN),
            HealthCheckResponse::SERVING);

  { std::ofstream(wedge) << "wedged\n"; }
  // A ping answered just before the wedge may still be reported.
  notify.Collect("WATCHDOG=1", absl::Milliseconds(400));
  EXPECT_TRUE(notify.Collect("WATCHDOG=1", absl::Seconds(1)).empty()) << d.Log();
  EXPECT_TRUE(Running(d.pid()));
  EXPECT_EQ(CheckHealth(d.unix_address()).value_or(HealthCheckResponse::UNKNOWN),
            HealthCheckResponse::NOT_SERVING);
  EXPECT_TRUE(absl::StrContains(d.Log(), "device loop 0 has not run a task")) << d.Log();

  unlink(wedge.c_str());
  EXPECT_TRUE(notify.WaitFor("WATCHDOG=1", absl::Seconds(2)).has_value()) << d.Log();
  const absl::Time deadline = absl::Now() + absl::Seconds(3);
  HealthCheckResponse::ServingStatus status = HealthCheckResponse::UNKNOWN;
  while (absl::Now() < deadline && status != HealthCheckResponse::SERVING) {
    status = CheckHealth(d.unix_address()).value_or(HealthCheckResponse::UNKNOWN);
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(status, HealthCheckResponse::SERVING);
  absl::StatusOr<int> code = d.Stop(SIGTERM);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
}

TEST(Health, WatchSeesNotServingWhenShutdownBegins) {
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start();
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto stub = Health::NewStub(
      grpc::CreateChannel((*daemon)->unix_address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  HealthCheckRequest req;
  std::unique_ptr<grpc::ClientReader<HealthCheckResponse>> watch = stub->Watch(&ctx, req);
  HealthCheckResponse resp;
  ASSERT_TRUE(watch->Read(&resp));
  EXPECT_EQ(resp.status(), HealthCheckResponse::SERVING);
  kill((*daemon)->pid(), SIGTERM);
  ASSERT_TRUE(watch->Read(&resp)) << "the watch ended without NOT_SERVING";
  EXPECT_EQ(resp.status(), HealthCheckResponse::NOT_SERVING);
  EXPECT_FALSE(watch->Read(&resp)) << "the watch did not end at shutdown";
  EXPECT_TRUE(watch->Finish().ok());
  absl::StatusOr<int> code = (*daemon)->Stop(SIGTERM);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
}

}  // namespace
}  // namespace cubed
