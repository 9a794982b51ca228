// The daemon's life around its clients: leases of killed client processes, SIGTERM with clients
// connected (busy, idle, or with a call still running), and the TCP listener.

#include <arpa/inet.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

#include "absl/strings/match.h"
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

// The restart drill (issue 15): a daemon killed with SIGKILL leaves its sockets behind; a new one
// on the same path replaces them and serves, a client of the dead one gets an error (never a hang
// or an answer from a session it does not have), and a new client works.
TEST(LifecycleTest, ADaemonKilledAndRestartedOnTheSameSocketServesNewClients) {
  char dir[] = "/tmp/cubed-restart-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string socket = std::string(dir) + "/cubed.sock";
  auto first = StartOrFail({"--listen=" + socket});
  ASSERT_NE(first, nullptr);
  auto old_client = ConnectTo("unix:" + socket, absl::Minutes(1));
  ASSERT_NE(old_client, nullptr);
  const std::vector<uint8_t> bytes = {1, 2, 3, 4};
  auto h = old_client->Create(bytes);
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_TRUE(old_client->Read({*h}).get().ok());

  auto killed = first->Stop(SIGKILL);
  ASSERT_TRUE(killed.ok()) << killed.status();
  EXPECT_EQ(*killed, 128 + SIGKILL);
  auto second = StartOrFail({"--listen=" + socket});  // Over the dead daemon's socket files.
  ASSERT_NE(second, nullptr);

  const absl::Time start = absl::Now();
  auto gone = old_client->Read({*h}).get();
  EXPECT_FALSE(gone.ok());
  // The stream's end (ring or gRPC) is UNAVAILABLE; a unary call reaches the new daemon, which
  // does not know the session: NOT_FOUND naming it.
  EXPECT_TRUE(gone.status().code() == absl::StatusCode::kUnavailable ||
              gone.status().code() == absl::StatusCode::kNotFound)
      << gone.status();
  if (gone.status().code() == absl::StatusCode::kUnavailable) {  // Note [Session lost].
    EXPECT_TRUE(absl::StrContains(gone.status().message(), " lost: ")) << gone.status();
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(15)) << "the old client waited for its answer";

  auto fresh = ConnectTo("unix:" + socket, absl::Minutes(1));
  ASSERT_NE(fresh, nullptr);
  auto again = fresh->Create(bytes);
  ASSERT_TRUE(again.ok()) << again.status();
  auto read = fresh->Read({*again}).get();
  ASSERT_TRUE(read.ok()) << read.status() << "\n" << second->LogTail();
  EXPECT_EQ((*read)[0], std::string(bytes.begin(), bytes.end()));
  old_client.reset();
  fresh.reset();
  second.reset();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
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

// One HTTP/2 frame: 9-byte header, then the payload.
std::string Frame(uint8_t type, uint8_t flags, uint32_t stream, const std::string& payload) {
  std::string f;
  const uint32_t n = static_cast<uint32_t>(payload.size());
  f += static_cast<char>(n >> 16);
  f += static_cast<char>(n >> 8);
  f += static_cast<char>(n);
  f += static_cast<char>(type);
  f += static_cast<char>(flags);
  for (int shift : {24, 16, 8, 0}) f += static_cast<char>((stream >> shift) & 0x7f);
  return f + payload;
}

// HPACK "literal header field without indexing, new name" (no Huffman; short strings only).
std::string Header(const std::string& name, const std::string& value) {
  return std::string(1, '\0') + static_cast<char>(name.size()) + name +
         static_cast<char>(value.size()) + value;
}

bool WriteAll(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

bool ReadAll(int fd, char* out, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = read(fd, out + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// A client that makes one health Check over its own HTTP/2 connection and then keeps the
// connection open without reading from it, as a stopped or busy client does, or a gRPC channel
// with no call running in a process where nothing polls (Python's sync channels, a C++ process
// that never used the callback API). Such a client never answers the GOAWAY's PING that the
// daemon sends at shutdown (Note [Idle connections at shutdown], server/daemon/daemon.cc). Returns
// the connected fd (the caller closes it), or -1 after failing the test.
int IdleRawClient(const std::string& address) {
  int fd = -1;
  if (absl::StartsWith(address, "unix:")) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const std::string path = address.substr(5);
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << address;
  } else {
    const size_t colon = address.rfind(':');
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
    EXPECT_EQ(inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr), 1);
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << address;
  }
  timeval timeout{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  const std::string headers = Header(":method", "POST") + Header(":scheme", "http") +
                              Header(":path", "/grpc.health.v1.Health/Check") +
                              Header(":authority", "cubed") +
                              Header("content-type", "application/grpc") + Header("te", "trailers");
  const std::string empty_request(5, '\0');  // Uncompressed, length 0: HealthCheckRequest{}.
  if (!WriteAll(fd, std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") + Frame(4, 0, 0, "") +
                        Frame(1, 0x4 /*END_HEADERS*/, 1, headers) +
                        Frame(0, 0x1 /*END_STREAM*/, 1, empty_request))) {
    ADD_FAILURE() << address << ": write: " << std::strerror(errno);
    close(fd);
    return -1;
  }
  // Frames until the trailers end stream 1; acknowledge SETTINGS and PINGs meanwhile.
  std::string message;  // The response's DATA.
  for (;;) {
    char header[9];
    if (!ReadAll(fd, header, sizeof(header))) {
      ADD_FAILURE() << address << ": the health Check got no answer";
      close(fd);
      return -1;
    }
    const size_t length = (static_cast<uint8_t>(header[0]) << 16) |
                          (static_cast<uint8_t>(header[1]) << 8) | static_cast<uint8_t>(header[2]);
    const uint8_t type = header[3], flags = header[4];
    const uint32_t stream = static_cast<uint8_t>(header[8]);
    std::string payload(length, '\0');
    if (!ReadAll(fd, payload.data(), length)) {
      ADD_FAILURE() << address << ": connection closed mid-frame";
      close(fd);
      return -1;
    }
    if (type == 4 && !(flags & 0x1)) WriteAll(fd, Frame(4, 0x1, 0, ""));       // SETTINGS ack.
    if (type == 6 && !(flags & 0x1)) WriteAll(fd, Frame(6, 0x1, 0, payload));  // PING ack.
    if (type == 0 && stream == 1) message += payload;
    if (stream == 1 && (flags & 0x1) != 0 && (type == 0 || type == 1)) break;  // END_STREAM.
  }
  // 5-byte prefix, then HealthCheckResponse{status: SERVING} = 08 01.
  EXPECT_EQ(message, std::string("\0\0\0\0\2\x08\x01", 7)) << address;
  return fd;
}

TEST(LifecycleTest, SigtermWithIdleClientsConnectedExitsPromptly) {
  auto daemon = StartOrFail({}, /*tcp=*/true);
  ASSERT_NE(daemon, nullptr);
  const int unix_fd = IdleRawClient(daemon->unix_address());
  const int tcp_fd = IdleRawClient(daemon->tcp_address());
  ASSERT_GE(unix_fd, 0);
  ASSERT_GE(tcp_fd, 0);
  // And SDK clients that made a call and then sit idle.
  auto sdk_unix = ConnectTo(daemon->unix_address(), absl::ZeroDuration());
  auto sdk_tcp = ConnectTo(daemon->tcp_address(), absl::ZeroDuration());
  ASSERT_NE(sdk_unix, nullptr);
  ASSERT_NE(sdk_tcp, nullptr);
  ASSERT_TRUE(sdk_unix->GetInfo().ok());
  ASSERT_TRUE(sdk_tcp->GetInfo().ok());

  // No call in flight: nothing to drain, so no reason to wait out the 5 s drain deadline.
  const absl::Time start = absl::Now();
  auto code = daemon->Stop(SIGTERM, absl::Seconds(15));
  const absl::Duration took = absl::Now() - start;
  close(unix_fd);
  close(tcp_fd);
  ASSERT_TRUE(code.ok()) << code.status() << "\ndaemon log:\n" << daemon->Log();
  EXPECT_EQ(*code, 0) << "daemon log:\n" << daemon->Log();
  EXPECT_LT(took, absl::Seconds(2)) << "SIGTERM with idle clients connected took "
                                    << absl::FormatDuration(took) << "\ndaemon log:\n"
                                    << daemon->Log();
}

// Waits for the tag the last async operation on `cq` was given; its `ok`.
bool Await(grpc::CompletionQueue& cq, void* tag) {
  void* got = nullptr;
  bool ok = false;
  EXPECT_TRUE(cq.Next(&got, &ok));
  EXPECT_EQ(got, tag);
  return ok;
}

TEST(LifecycleTest, SigtermLetsACallInFlightFinishWhileIdleClientsAreConnected) {
  auto daemon = StartOrFail({});
  ASSERT_NE(daemon, nullptr);
  const int idle_fd = IdleRawClient(daemon->unix_address());
  ASSERT_GE(idle_fd, 0);
  // A call that stays in flight for as long as the client wants: a reflection stream (the
  // daemon's drain ends its own session streams, not this one).
  grpc::GenericStub stub(
      grpc::CreateChannel(daemon->unix_address(), grpc::InsecureChannelCredentials()));
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto call =
      stub.PrepareCall(&ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  ASSERT_NE(call, nullptr);
  int tag = 0;
  call->StartCall(&tag);
  ASSERT_TRUE(Await(cq, &tag));
  // ServerReflectionRequest{list_services: ""}: field 7, length 0.
  grpc::Slice list_services(std::string("\x3a\x00", 2));
  const grpc::ByteBuffer request(&list_services, 1);
  grpc::ByteBuffer response;
  call->Write(request, &tag);
  ASSERT_TRUE(Await(cq, &tag));
  call->Read(&response, &tag);
  ASSERT_TRUE(Await(cq, &tag));

  ASSERT_EQ(kill(daemon->pid(), SIGTERM), 0);
  absl::SleepFor(absl::Milliseconds(500));  // Long past the idle connections' drop.
  // The call still runs: its connection was not dropped with the idle one.
  call->Write(request, &tag);
  ASSERT_TRUE(Await(cq, &tag)) << "daemon log:\n" << daemon->Log();
  response.Clear();
  call->Read(&response, &tag);
  ASSERT_TRUE(Await(cq, &tag)) << "daemon log:\n" << daemon->Log();
  EXPECT_GT(response.Length(), 0u);
  call->WritesDone(&tag);
  ASSERT_TRUE(Await(cq, &tag));
  grpc::Status status;
  call->Finish(&status, &tag);
  ASSERT_TRUE(Await(cq, &tag));
  EXPECT_TRUE(status.ok()) << status.error_message();

  // Its end was the last thing the daemon waited for.
  auto code = daemon->Stop(0, absl::Seconds(2));
  close(idle_fd);
  ASSERT_TRUE(code.ok()) << code.status() << "\ndaemon log:\n" << daemon->Log();
  EXPECT_EQ(*code, 0) << "daemon log:\n" << daemon->Log();
  cq.Shutdown();
  void* ignored_tag = nullptr;
  bool ignored_ok = false;
  while (cq.Next(&ignored_tag, &ignored_ok)) {
  }
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
