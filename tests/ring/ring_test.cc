// The command ring (Note [Command ring], common/shm_ring.h; docs/api.md "The command ring")
// against the real daemon: the SDK's automatic use of it, and everything a hostile local client
// can do to its ring: refused files and requests, corrupted positions and chunks, requests that
// do not parse, replies it never reads, doorbell floods, hang-ups and kill -9. Each case checks
// that the daemon keeps serving others and that the session, its memory and the ring's mapping
// are gone afterwards.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "common/fd_passing.h"
#include "common/shm_ring.h"
#include "cubed/v1/compute.grpc.pb.h"
#include "cubed/v1/ring.pb.h"
#include "cubed/v1/session.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/testing/child_test.h"
#include "tests/testing/daemon_process.h"

namespace {

using ::cubed::Client;
using ::cubed::ClientOptions;
using ::cubed::RingChunk;
using ::cubed::RingMemory;
using ::cubed::RingReader;
using ::cubed::RingWriter;
using ::cubed::StreamCarrier;
using ::cubed::testing::DaemonProcess;

constexpr uint64_t kCapacity = 4096;

// Mappings of command rings in a process.
int RingMappings(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/maps"));
  std::string line;
  int n = 0;
  while (std::getline(in, line)) n += absl::StrContains(line, "memfd:cubed-ring") ? 1 : 0;
  return n;
}

// A hand-made ring client: the ring file, the connection and the doorbells, driven by the
// layout's own readers and writers so a test can also break every rule.
struct RawRing {
  int memfd = -1;
  uint8_t* base = nullptr;
  uint64_t bytes = 0;
  RingMemory memory;
  int sock = -1;
  std::vector<int> doorbells;  // daemon, reply, space.
  cubed::v1::OpenRingResponse answer;
  RingWriter commands;
  RingReader replies;

  ~RawRing() {
    if (base != nullptr) munmap(base, bytes);
    for (int fd : doorbells) close(fd);
    if (sock >= 0) close(sock);
    if (memfd >= 0) close(memfd);
  }

  void RingDaemon() {
    if (!doorbells.empty()) cubed::RingDoorbell(doorbells[0]);
  }
  // Appends one message (which must fit) and rings the daemon.
  void Send(RingChunk kind, const std::string& message) {
    absl::string_view rest = message;
    absl::StatusOr<bool> done = commands.Append(kind, rest);
    ASSERT_TRUE(done.ok() && *done) << "the message did not fit";
    RingDaemon();
  }
  void SendRequest(const cubed::v1::SessionRequest& request) {
    Send(RingChunk::kRequest, request.SerializeAsString());
  }
  // The next whole message of the reply ring within `timeout`, or nullopt.
  std::optional<std::pair<RingChunk, std::string>> Next(
      absl::Duration timeout = absl::Seconds(10)) {
    std::string message;
    RingChunk kind;
    const absl::Time until = absl::Now() + timeout;
    while (absl::Now() < until) {
      absl::StatusOr<bool> got = replies.Next(&message, &kind);
      EXPECT_TRUE(got.ok()) << got.status();
      if (!got.ok()) return std::nullopt;
      if (*got) return std::make_pair(kind, message);
      RingDaemon();  // It may wait for room.
      usleep(500);
    }
    return std::nullopt;
  }
  // The stream's end: the end record's status.
  absl::Status End(absl::Duration timeout = absl::Seconds(10)) {
    for (;;) {
      auto next = Next(timeout);
      if (!next.has_value()) return absl::DeadlineExceededError("no end record");
      if (next->first != RingChunk::kEnd) continue;
      cubed::v1::RingEnd end;
      EXPECT_TRUE(end.ParseFromString(next->second));
      return absl::Status(static_cast<absl::StatusCode>(end.code()), end.message());
    }
  }
};

class RingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto daemon = DaemonProcess::Start();
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
  }

  std::string RingSocket() const {
    return absl::StrCat(daemon_->unix_address().substr(5), ".ring");
  }

  std::unique_ptr<Client> Connect(StreamCarrier carrier = StreamCarrier::kRing) {
    ClientOptions o;
    o.address = daemon_->unix_address();
    o.stream_carrier = carrier;
    auto client = Client::Connect(o);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  cubed::v1::GetStatsResponse Stats() {
    auto channel = grpc::CreateChannel(daemon_->unix_address(), grpc::InsecureChannelCredentials());
    auto stub = cubed::v1::Compute::NewStub(channel);
    grpc::ClientContext context;
    cubed::v1::GetStatsResponse response;
    EXPECT_TRUE(stub->GetStats(&context, cubed::v1::GetStatsRequest(), &response).ok());
    return response;
  }
  uint64_t Sessions() {
    cubed::v1::GetStatsResponse s = Stats();
    return s.devices_size() > 0 ? s.devices(0).sessions() : 0;
  }
  uint64_t BytesInUse() {
    cubed::v1::GetStatsResponse s = Stats();
    return s.devices_size() > 0 ? s.devices(0).memory().bytes_in_use() : 0;
  }

  // Waits until no session, ring or ring mapping is left (up to 10 s); true when so, else
  // false with what was left in `left_`.
  bool AllGone() {
    for (int i = 0; i < 1000; ++i) {
      cubed::v1::GetStatsResponse s = Stats();
      const bool gone = s.open_rings() == 0 && s.devices_size() > 0 &&
                        s.devices(0).sessions() == 0 && s.devices(0).memory().bytes_in_use() == 0 &&
                        RingMappings(daemon_->pid()) == 0;
      if (gone) return true;
      left_ = absl::StrCat("rings ", s.open_rings(), ", streams ", s.open_streams(), ", sessions ",
                           s.devices_size() > 0 ? s.devices(0).sessions() : 0, ", bytes ",
                           s.devices_size() > 0 ? s.devices(0).memory().bytes_in_use() : 0,
                           ", mappings ", RingMappings(daemon_->pid()));
      usleep(10000);
    }
    return false;
  }
  std::string left_;

  // A ring file with a fresh header (then `edit` may spoil it), sealed as `seals` says.
  std::unique_ptr<RawRing> File(uint64_t command = kCapacity, uint64_t reply = kCapacity,
                                int seals = F_SEAL_SHRINK) {
    auto r = std::make_unique<RawRing>();
    r->bytes = cubed::kRingHeaderBytes + command + reply;
    r->memfd = memfd_create("cubed-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    EXPECT_GE(r->memfd, 0);
    EXPECT_EQ(ftruncate(r->memfd, static_cast<off_t>(r->bytes)), 0);
    if (seals != 0) {
      EXPECT_EQ(fcntl(r->memfd, F_ADD_SEALS, seals), 0);
    }
    r->base = static_cast<uint8_t*>(
        mmap(nullptr, r->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, r->memfd, 0));
    EXPECT_NE(r->base, MAP_FAILED);
    r->memory = RingMemory{r->base, command, reply};
    cubed::InitRingHeader(r->memory);
    return r;
  }

  // Sends the open request (with `fds`, default the ring's memfd) and reads the answer.
  void Open(RawRing& r, std::optional<std::vector<int>> fds = std::nullopt,
            std::string request = "") {
    absl::StatusOr<int> sock = cubed::ConnectSeqpacket(RingSocket(), "ring socket");
    ASSERT_TRUE(sock.ok()) << sock.status();
    r.sock = *sock;
    if (request.empty()) {
      cubed::v1::OpenRingRequest open;
      open.set_client("ring_test");
      request = open.SerializeAsString();
    }
    const std::vector<int> attached = fds.value_or(std::vector<int>{r.memfd});
    const absl::Status sent = cubed::SendWithDescriptors(r.sock, request, attached, "ring socket");
    ASSERT_TRUE(sent.ok()) << sent;
    pollfd p{r.sock, POLLIN, 0};
    ASSERT_EQ(poll(&p, 1, 10000), 1) << "no answer";
    absl::StatusOr<cubed::ReceivedMessage> answer =
        cubed::ReceiveWithDescriptors(r.sock, 4096, 4, 0);
    ASSERT_TRUE(answer.ok()) << answer.status();
    ASSERT_TRUE(r.answer.ParseFromString(answer->bytes));
    for (size_t i = 0; i < answer->fds().size(); ++i) r.doorbells.push_back(answer->Take(i));
    const RingMemory& m = r.memory;
    r.commands = RingWriter(m.command_data(), m.command_capacity, m.word64(cubed::kCommandTailAt),
                            m.word64(cubed::kCommandHeadAt));
    r.replies = RingReader(m.reply_data(), m.reply_capacity, m.word64(cubed::kReplyTailAt),
                           m.word64(cubed::kReplyHeadAt), uint64_t{1} << 30);
  }

  // Opens a ring and its session; returns it with `opened` read.
  std::unique_ptr<RawRing> OpenSession(uint64_t command = kCapacity, uint64_t reply = kCapacity) {
    std::unique_ptr<RawRing> r = File(command, reply);
    Open(*r);
    EXPECT_EQ(r->answer.code(), 0) << r->answer.message();
    EXPECT_EQ(r->doorbells.size(), 3u);
    cubed::v1::SessionRequest open;
    open.mutable_open()->set_device(0);
    r->SendRequest(open);
    auto opened = r->Next();
    EXPECT_TRUE(opened.has_value());
    if (opened.has_value()) {
      cubed::v1::SessionResponse response;
      EXPECT_EQ(opened->first, RingChunk::kResponse);
      EXPECT_TRUE(response.ParseFromString(opened->second));
      EXPECT_TRUE(response.has_opened());
      first_id_ = response.opened().first_client_id();
    }
    return r;
  }

  // A create of `bytes` bytes under a fresh id.
  cubed::v1::Command Create(uint64_t seq, uint64_t bytes) {
    cubed::v1::Command c;
    c.set_seq(seq);
    c.mutable_create()->set_id(first_id_ + seq);
    c.mutable_create()->set_data(std::string(bytes, 'x'));
    return c;
  }

  // Expects the open of `r` to be refused with `code` and a message containing `why`, leaving
  // no session or mapping.
  void ExpectRefused(RawRing& r, int code, const std::string& why,
                     std::optional<std::vector<int>> fds = std::nullopt, std::string request = "") {
    Open(r, std::move(fds), std::move(request));
    EXPECT_EQ(r.answer.code(), code) << r.answer.message();
    EXPECT_TRUE(absl::StrContains(r.answer.message(), why)) << r.answer.message();
    EXPECT_TRUE(r.doorbells.empty());
    EXPECT_TRUE(AllGone()) << left_;
  }

  std::unique_ptr<DaemonProcess> daemon_;
  uint64_t first_id_ = 0;
};

TEST_F(RingTest, TheSdkCarriesItsStreamThroughTheRingAndLeavesNothingBehind) {
  std::unique_ptr<Client> client = Connect(StreamCarrier::kAuto);
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->stream_carrier(), StreamCarrier::kRing);
  cubed::v1::GetStatsResponse stats = Stats();
  EXPECT_EQ(stats.open_rings(), 1u);
  EXPECT_EQ(stats.open_streams(), 1u);
  EXPECT_GE(stats.rings_opened(), 1u);
  EXPECT_EQ(RingMappings(daemon_->pid()), 1);
  // A message larger than both rings (4 MiB each by default) travels in chunks.
  std::vector<uint8_t> data(9 << 20);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7);
  auto h = client->Create(data);
  ASSERT_TRUE(h.ok()) << h.status();
  auto read = client->Read({*h}).get();
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 1u);
  EXPECT_TRUE((*read)[0] == std::string(data.begin(), data.end()));
  *h = cubed::Handle();
  client.reset();
  EXPECT_TRUE(AllGone()) << left_;
  // gRPC when asked, beside a ring.
  std::unique_ptr<Client> grpc = Connect(StreamCarrier::kGrpc);
  ASSERT_NE(grpc, nullptr);
  EXPECT_EQ(grpc->stream_carrier(), StreamCarrier::kGrpc);
  EXPECT_EQ(Stats().open_rings(), 0u);
}

TEST_F(RingTest, HostileFilesAndRequestsAreRefusedWithTheirReason) {
  {
    auto r = File(kCapacity, kCapacity, /*seals=*/0);
    ExpectRefused(*r, 3, "not sealed against shrinking");
  }
  {
    auto r = File();
    *r->memory.word64(cubed::kRingMagicAt) = 42;
    ExpectRefused(*r, 3, "magic");
  }
  {
    auto r = File();
    *r->memory.word32(cubed::kRingVersionAt) = 9;
    ExpectRefused(*r, 3, "version 9");
  }
  {
    auto r = File();
    *r->memory.word64(cubed::kCommandCapacityAt) = 5000;  // Not a power of two.
    ExpectRefused(*r, 3, "capacity 5000");
  }
  {
    auto r = File();
    *r->memory.word64(cubed::kReplyCapacityAt) = 2 * kCapacity;  // Larger than the file.
    ExpectRefused(*r, 3, "need a file of");
  }
  {
    auto r = File();
    *r->memory.word64(cubed::kCommandTailAt) = 64;  // Not a fresh ring.
    ExpectRefused(*r, 3, "not 0");
  }
  {
    auto r = File();
    ExpectRefused(*r, 3, "exactly one file descriptor", std::vector<int>{});
  }
  {
    auto r = File();
    ExpectRefused(*r, 3, "exactly one file descriptor", std::vector<int>{r->memfd, r->memfd});
  }
  {
    auto r = File();
    ExpectRefused(*r, 3, "not a serialized cubed.v1.OpenRingRequest", std::nullopt,
                  std::string("\xff\xff\xff", 3));
  }
  {
    auto r = File();
    int pipes[2];
    ASSERT_EQ(pipe(pipes), 0);
    ExpectRefused(*r, 3, "not sealable memory", std::vector<int>{pipes[0]});
    close(pipes[0]);
    close(pipes[1]);
  }
  // The daemon still opens good rings.
  auto good = OpenSession();
  EXPECT_EQ(Stats().open_rings(), 1u);
}

TEST_F(RingTest, ACorruptTailEndsOnlyThatStreamWithDataLoss) {
  std::unique_ptr<Client> bystander = Connect();
  ASSERT_NE(bystander, nullptr);
  auto r = OpenSession();
  cubed::v1::SessionRequest request;
  *request.add_commands() = Create(1, 1000);
  r->SendRequest(request);
  // The tail jumps past the ring's capacity.
  __atomic_store_n(r->memory.word64(cubed::kCommandTailAt), uint64_t{1} << 40, __ATOMIC_SEQ_CST);
  r->RingDaemon();
  absl::Status end = r->End();
  EXPECT_EQ(end.code(), absl::StatusCode::kDataLoss) << end;
  EXPECT_TRUE(absl::StrContains(end.message(), "tail")) << end;
  r.reset();
  // The bystander's session is the only one left, and it works.
  auto h = bystander->Create(std::vector<uint8_t>(16, 1));
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_TRUE(bystander->Sync().get().ok());
  *h = cubed::Handle();
  bystander.reset();
  EXPECT_TRUE(AllGone()) << left_;
}

TEST_F(RingTest, BadChunksAndUnparsableRequestsEndTheStreamNamingWhy) {
  struct Case {
    std::string name;
    uint32_t length;
    uint32_t flags;
    std::string payload;
    absl::StatusCode code;
    std::string why;
  };
  const std::vector<Case> cases = {
      {"unknown kind", 0, 9, "", absl::StatusCode::kDataLoss, "flags"},
      {"unknown flag", 0, 0x201, "", absl::StatusCode::kDataLoss, "flags"},
      {"a reply chunk", 0, 3, "", absl::StatusCode::kDataLoss, "kind 3"},
      {"longer than published", 4000, 1, "", absl::StatusCode::kDataLoss, "longer"},
      {"not a SessionRequest", 3, 1, "\xff\xff\xff", absl::StatusCode::kInvalidArgument,
       "does not parse"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto r = OpenSession();
    // Written by hand: a header and its payload, published as 8 + padded bytes.
    const uint64_t tail = r->commands.tail();
    uint8_t* at = r->memory.command_data() + (tail & (kCapacity - 1));
    std::memcpy(at, &c.length, 4);
    std::memcpy(at + 4, &c.flags, 4);
    std::memcpy(at + 8, c.payload.data(), c.payload.size());
    const uint64_t published = 8 + ((c.payload.size() + 7) & ~size_t{7});
    __atomic_store_n(r->memory.word64(cubed::kCommandTailAt), tail + published, __ATOMIC_SEQ_CST);
    r->RingDaemon();
    absl::Status end = r->End();
    EXPECT_EQ(end.code(), c.code) << end;
    EXPECT_TRUE(absl::StrContains(end.message(), c.why)) << end;
    r.reset();
    EXPECT_TRUE(AllGone()) << left_;
  }
}

TEST_F(RingTest, AClientThatHangsUpLosesItsSessionAndMemory) {
  auto r = OpenSession();
  cubed::v1::SessionRequest request;
  *request.add_commands() = Create(1, 1 << 20);
  cubed::v1::Command usage;
  usage.set_seq(2);
  usage.mutable_memory_usage();
  *request.add_commands() = usage;
  // 1 MiB and more: the request travels in chunks through the 4 KiB ring.
  const std::string bytes = request.SerializeAsString();
  absl::string_view rest = bytes;
  for (;;) {
    absl::StatusOr<bool> done = r->commands.Append(RingChunk::kRequest, rest);
    ASSERT_TRUE(done.ok());
    r->RingDaemon();
    if (*done) break;
    usleep(100);
  }
  auto reply = r->Next();
  ASSERT_TRUE(reply.has_value());
  EXPECT_GE(BytesInUse(), uint64_t{1} << 20);
  EXPECT_EQ(Sessions(), 1u);
  close(r->sock);  // The hang-up.
  r->sock = -1;
  EXPECT_TRUE(AllGone()) << left_;
}

TEST_F(RingTest, AClientThatNeverReadsRepliesStallsOnlyItself) {
  std::unique_ptr<Client> bystander = Connect();
  ASSERT_NE(bystander, nullptr);
  auto r = OpenSession();
  // Answering commands until the 4 KiB reply ring is full and the stream parks.
  uint64_t seq = 1;
  for (int batch = 0; batch < 20; ++batch) {
    cubed::v1::SessionRequest request;
    for (int i = 0; i < 50; ++i) {
      cubed::v1::Command c;
      c.set_seq(seq++);
      c.mutable_memory_usage();
      *request.add_commands() = c;
    }
    const std::string bytes = request.SerializeAsString();
    absl::string_view rest = bytes;
    const absl::Time until = absl::Now() + absl::Seconds(1);
    while (absl::Now() < until) {
      absl::StatusOr<bool> done = r->commands.Append(RingChunk::kRequest, rest);
      ASSERT_TRUE(done.ok());
      r->RingDaemon();
      if (*done) break;
      usleep(1000);
    }
  }
  // Nothing read: the reply ring is full; others are served all the same.
  for (int i = 0; i < 20; ++i) {
    auto h = bystander->Create(std::vector<uint8_t>(64, 2));
    ASSERT_TRUE(h.ok()) << h.status();
  }
  EXPECT_TRUE(bystander->Sync().get().ok());
  // Flooding the doorbell wakes only this ring's thread.
  for (int i = 0; i < 100000; ++i) r->RingDaemon();
  EXPECT_TRUE(bystander->Sync().get().ok());
  close(r->sock);
  r->sock = -1;
  bystander.reset();
  EXPECT_TRUE(AllGone()) << left_;
}

TEST_F(RingTest, ADoorbellMadeBlockingAndDrainedByTheClientStallsNothingElse) {
  auto r = OpenSession();
  // The client owns the same open file description: it eats the counts (while the descriptor
  // is still non-blocking, so this test never blocks), then clears O_NONBLOCK for the daemon.
  for (int i = 0; i < 10; ++i) {
    r->RingDaemon();
    uint64_t count;
    (void)!read(r->doorbells[0], &count, sizeof(count));
  }
  ASSERT_EQ(fcntl(r->doorbells[0], F_SETFL, 0), 0);
  r->RingDaemon();
  std::unique_ptr<Client> bystander = Connect();
  ASSERT_NE(bystander, nullptr);
  EXPECT_TRUE(bystander->Sync().get().ok());
  close(r->sock);  // The hang-up still ends it.
  r->sock = -1;
  bystander.reset();
  EXPECT_TRUE(AllGone()) << left_;
}

TEST_F(RingTest, AClientThatUnmapsItsRingLeavesTheDaemonsMappingValid) {
  auto r = OpenSession();
  ASSERT_EQ(munmap(r->base, r->bytes), 0);
  r->base = nullptr;
  EXPECT_EQ(RingMappings(daemon_->pid()), 1);
  std::unique_ptr<Client> bystander = Connect();
  ASSERT_NE(bystander, nullptr);
  EXPECT_TRUE(bystander->Sync().get().ok());
  close(r->sock);
  r->sock = -1;
  bystander.reset();
  EXPECT_TRUE(AllGone()) << left_;
}

// The child half of AKilledRingClientLeavesNothingBehind.
TEST(RingChild, AllocateThenWaitForTheKill) {
  const char* address = std::getenv("CUBED_RING_CHILD_ADDRESS");
  if (address == nullptr) GTEST_SKIP() << "run by AKilledRingClientLeavesNothingBehind only";
  ClientOptions o;
  o.address = address;
  o.stream_carrier = StreamCarrier::kRing;
  auto client = Client::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status();
  auto h = (*client)->Create(std::vector<uint8_t>(1 << 20, 3));
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE((*client)->Sync().get().ok());
  std::printf("ready\n");
  std::fflush(stdout);
  pause();
}

TEST_F(RingTest, AKilledRingClientLeavesNothingBehind) {
  absl::StatusOr<pid_t> started = cubed::testing::StartReadyChild(
      "RingChild.*", "CUBED_RING_CHILD_ADDRESS", daemon_->unix_address());
  ASSERT_TRUE(started.ok()) << started.status();
  const pid_t child = *started;
  EXPECT_EQ(Stats().open_rings(), 1u);
  EXPECT_GE(BytesInUse(), uint64_t{1} << 20);
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(AllGone()) << left_;
}

// Note [Cached positions]: a writer reads the head again only when its last view leaves too
// little room, a reader the tail only when it has read up to its last view; a stale view never
// loses or invents bytes, and a corrupt word is still found once the cached one is used up.
TEST(RingPositions, EachSideReadsTheOtherOnlyWhenItsLastViewSaysWait) {
  std::vector<uint64_t> words(cubed::kRingHeaderBytes / 8 + 2 * kCapacity / 8, 0);
  RingMemory m{reinterpret_cast<uint8_t*>(words.data()), kCapacity, kCapacity};
  cubed::InitRingHeader(m);
  RingWriter writer(m.command_data(), kCapacity, m.word64(cubed::kCommandTailAt),
                    m.word64(cubed::kCommandHeadAt));
  RingReader reader(m.command_data(), kCapacity, m.word64(cubed::kCommandTailAt),
                    m.word64(cubed::kCommandHeadAt), kCapacity);
  const std::string big(kCapacity - 64, 'x');  // Leaves 56 bytes: one 40-byte message more.
  absl::string_view rest = big;
  ASSERT_TRUE(writer.Append(RingChunk::kRequest, rest).value());
  const std::string small(40, 's');
  rest = small;
  ASSERT_TRUE(writer.Append(RingChunk::kRequest, rest).value());
  std::string message;
  RingChunk kind;
  ASSERT_TRUE(reader.Next(&message, &kind).value());
  EXPECT_EQ(message, big);
  message.clear();
  // The writer's view of the head is from before the read: 8 bytes free. It reads the head again
  // for a message that does not fit that view, and the message goes in whole.
  const std::string after(100, 'a');
  rest = after;
  ASSERT_TRUE(writer.Append(RingChunk::kRequest, rest).value());
  ASSERT_TRUE(reader.Next(&message, &kind).value());
  EXPECT_EQ(message, small);
  message.clear();
  ASSERT_TRUE(reader.Next(&message, &kind).value());  // Past its view: it read the tail again.
  EXPECT_EQ(message, after);
  message.clear();
  // Two more, of which the reader reads one; then the writer moves its tail back (a hostile
  // client): the reader still reads what it saw published, then reads the tail again and finds
  // it corrupt.
  for (const std::string& next : {small, after}) {
    rest = next;
    ASSERT_TRUE(writer.Append(RingChunk::kRequest, rest).value());
  }
  ASSERT_TRUE(reader.Next(&message, &kind).value());
  EXPECT_EQ(message, small);
  message.clear();
  cubed::StoreSeqCst(m.word64(cubed::kCommandTailAt), reader.head() - 8);
  ASSERT_TRUE(reader.Next(&message, &kind).value());
  EXPECT_EQ(message, after);
  message.clear();
  absl::StatusOr<bool> corrupt = reader.Next(&message, &kind);
  ASSERT_FALSE(corrupt.ok());
  EXPECT_EQ(corrupt.status().code(), absl::StatusCode::kDataLoss) << corrupt.status();
}

// Note [Waiting awake]: the SDK's waits poll for four times the spin the daemon suggests when it
// opens the ring (at most 1 ms), none over gRPC, what ClientOptions::reply_spin says when set;
// Client::Await returns what future.get() would.
TEST(RingReplySpin, WaitsPollForWhatTheDaemonSuggestsOrWhatTheClientSays) {
  DaemonProcess::Options options;
  options.flags = {"--ring_spin_us=30"};
  auto daemon = DaemonProcess::Start(options);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto connect = [&](StreamCarrier carrier, absl::Duration spin) {
    ClientOptions o;
    o.address = (*daemon)->unix_address();
    o.stream_carrier = carrier;
    o.reply_spin = spin;
    return Client::Connect(o);
  };
  auto ring = connect(StreamCarrier::kRing, absl::Microseconds(-1));
  ASSERT_TRUE(ring.ok()) << ring.status();
  EXPECT_EQ((*ring)->reply_spin(), absl::Microseconds(120));
  auto grpc = connect(StreamCarrier::kGrpc, absl::Microseconds(-1));
  ASSERT_TRUE(grpc.ok()) << grpc.status();
  EXPECT_EQ((*grpc)->reply_spin(), absl::ZeroDuration());
  auto set = connect(StreamCarrier::kRing, absl::Microseconds(7));
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ((*set)->reply_spin(), absl::Microseconds(7));
  auto too_long = connect(StreamCarrier::kRing, absl::Seconds(2));
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(too_long.status().message(), "reply_spin")) << too_long.status();
  for (Client* c : {ring->get(), grpc->get(), set->get()}) {
    const std::vector<uint8_t> bytes = {1, 2, 3, 4};
    auto h = c->Create(bytes);
    ASSERT_TRUE(h.ok()) << h.status();
    auto read = c->Await(c->Read({*h}));
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ((*read)[0], std::string("\x01\x02\x03\x04", 4));
    // An error comes back through Await as through get().
    auto bad = c->Await(c->Read({cubed::Binding(*h, 3, 3)}));
    EXPECT_FALSE(bad.ok());
  }
}

}  // namespace
