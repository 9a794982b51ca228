// Shared-memory regions (Note [Shared-memory regions], server/channel/shared_region.h; docs/api.md
// "Shared-memory regions") against the real daemon: data round trips through the C++ SDK, every
// descriptor and request the region socket must refuse, ranges outside a region, regions of
// another session, and lifecycles: the daemon's mapping is gone after ReleaseRegion, after the
// session's end and after a refused registration, and memory usage is back to where it was.

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/shared_memory.h"
#include "cubed/v1/compute.grpc.pb.h"
#include "cubed/v1/region.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/testing/child_test.h"
#include "tests/testing/daemon_process.h"

namespace {

using ::cubed::Binding;
using ::cubed::Client;
using ::cubed::ClientOptions;
using ::cubed::Region;
using ::cubed::SharedMemory;
using ::cubed::Tensor;
using ::cubed::testing::DaemonProcess;

// Mappings of memfd regions in a process (the daemon's view of the regions it holds); command
// rings (memfd:cubed-ring, Note [Command ring]) are not regions.
int RegionMappings(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/maps"));
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    n += absl::StrContains(line, "memfd:") && !absl::StrContains(line, "memfd:cubed-ring") ? 1 : 0;
  }
  return n;
}

void Fill(absl::Span<uint8_t> bytes, uint8_t seed) {
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 131 + seed);
}

// A sealed memfd of `size` bytes created by hand (seals as given), for refusals.
int Memfd(uint64_t size, int seals, unsigned flags = MFD_CLOEXEC | MFD_ALLOW_SEALING) {
  const int fd = memfd_create("cubed-test", flags);
  EXPECT_GE(fd, 0);
  if (size > 0) {
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(size)), 0);
  }
  if (seals != 0) {
    EXPECT_EQ(fcntl(fd, F_ADD_SEALS, seals), 0);
  }
  return fd;
}

class RegionTest : public ::testing::Test {
 protected:
  void SetUp() override { Start({}); }

  void Start(std::vector<std::string> flags) {
    client_.reset();  // Before its daemon.
    daemon_.reset();
    DaemonProcess::Options options;
    options.flags = std::move(flags);
    auto daemon = DaemonProcess::Start(options);
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
    ClientOptions c;
    c.address = daemon_->unix_address();
    c.region_threshold = 0;  // Explicit regions only (AutomaticPath tests the staging region).
    auto client = Client::Connect(c);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  // Device 0's region figures as GetStats reports them.
  cubed::v1::DeviceStats Stats() {
    auto channel = grpc::CreateChannel(daemon_->unix_address(), grpc::InsecureChannelCredentials());
    auto stub = cubed::v1::Compute::NewStub(channel);
    grpc::ClientContext context;
    cubed::v1::GetStatsResponse response;
    EXPECT_TRUE(stub->GetStats(&context, cubed::v1::GetStatsRequest(), &response).ok());
    return response.devices_size() > 0 ? response.devices(0) : cubed::v1::DeviceStats();
  }

  std::string RegionSocket() const {
    return absl::StrCat(daemon_->unix_address().substr(5), ".regions");
  }

  // Sends one raw request on the region socket with `fds` attached; returns the answer.
  cubed::v1::RegisterRegionResponse Raw(const std::string& request, std::vector<int> fds) {
    const int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, RegionSocket().c_str(), sizeof(addr.sun_path) - 1);
    EXPECT_EQ(connect(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    std::string bytes = request;
    iovec iov{bytes.data(), bytes.size()};
    std::vector<char> control(CMSG_SPACE(sizeof(int) * std::max<size_t>(fds.size(), 1)));
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (!fds.empty()) {
      msg.msg_control = control.data();
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    EXPECT_GE(sendmsg(sock, &msg, MSG_NOSIGNAL), 0) << std::strerror(errno);
    char reply[2048];
    const ssize_t n = recv(sock, reply, sizeof(reply), 0);
    close(sock);
    cubed::v1::RegisterRegionResponse response;
    EXPECT_GT(n, 0) << "no answer";
    if (n > 0) {
      EXPECT_TRUE(response.ParseFromArray(reply, static_cast<int>(n)));
    }
    return response;
  }

  std::string Request(uint64_t session) {
    cubed::v1::RegisterRegionRequest r;
    r.set_session(session);
    return r.SerializeAsString();
  }

  // Expects `fd` (closed here) to be refused with INVALID_ARGUMENT mentioning `why`, leaving no
  // mapping behind.
  void ExpectRefused(int fd, const std::string& why) {
    const int before = RegionMappings(daemon_->pid());
    cubed::v1::RegisterRegionResponse r = Raw(Request(client_->session()), {fd});
    close(fd);
    EXPECT_EQ(r.code(), 3) << r.message();  // INVALID_ARGUMENT
    EXPECT_TRUE(absl::StrContains(r.message(), why)) << r.message();
    EXPECT_EQ(RegionMappings(daemon_->pid()), before);
  }

  std::unique_ptr<DaemonProcess> daemon_;
  std::unique_ptr<Client> client_;
};

TEST_F(RegionTest, CreateAndReadThroughARegionOfOddSize) {
  const auto before = client_->GetMemoryUsage();
  ASSERT_TRUE(before.ok()) << before.status();
  constexpr uint64_t kBytes = (1 << 20) + 3;
  auto memory = SharedMemory::Create(2 * kBytes + 7);
  ASSERT_TRUE(memory.ok()) << memory.status();
  auto shared = std::make_shared<SharedMemory>(*std::move(memory));
  Fill(shared->bytes().subspan(5, kBytes), 7);
  absl::StatusOr<Region> region = client_->RegisterRegion(shared);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ(RegionMappings(daemon_->pid()), 1);

  absl::StatusOr<cubed::Handle> h = client_->CreateFromRegion(*region, 5, kBytes);
  ASSERT_TRUE(h.ok()) << h.status();
  // The bytes went through the region, not a message: the normal read returns them.
  auto read = client_->Read({*h}).get();
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ((*read)[0].size(), kBytes);
  EXPECT_EQ(std::memcmp((*read)[0].data(), shared->bytes().data() + 5, kBytes), 0);

  // Read two views back into the region's second half, one after the other.
  const uint64_t at = kBytes + 6;
  auto written = client_
                     ->ReadIntoRegion({Binding(*h, 0, kBytes - 10), Binding(*h, kBytes - 1, 0)},
                                      *region, at, kBytes + 1)
                     .get();
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(*written, 11u);
  EXPECT_EQ(std::memcmp(shared->bytes().data() + at, shared->bytes().data() + 5, 10), 0);
  EXPECT_EQ(shared->bytes()[at + 10], shared->bytes()[5 + kBytes - 1]);

  // A tensor created from the region and read back packed, strided by the daemon's layout.
  Fill(shared->bytes().subspan(0, 6 * 4), 3);
  absl::StatusOr<Tensor> t = client_->CreateTensorFromRegion(*region, 0, {2, 3}, 4);
  ASSERT_TRUE(t.ok()) << t.status();
  auto packed = client_->ReadTensorIntoRegion({*t}, *region, at, 24).get();
  ASSERT_TRUE(packed.ok()) << packed.status();
  EXPECT_EQ(*packed, 24u);
  EXPECT_EQ(std::memcmp(shared->bytes().data() + at, shared->bytes().data(), 24), 0);

  cubed::v1::DeviceStats stats = Stats();
  EXPECT_EQ(stats.regions(), 1u);
  EXPECT_EQ(stats.regions_registered(), 1u);
  EXPECT_EQ(stats.region_bytes_created(), kBytes + 24);
  EXPECT_EQ(stats.region_bytes_read(), 11u + 24);

  ASSERT_TRUE(client_->ReleaseRegion(*region).ok());
  ASSERT_TRUE(client_->Sync().get().ok());
  EXPECT_EQ(RegionMappings(daemon_->pid()), 0) << "the daemon still maps a released region";
  EXPECT_EQ(Stats().regions(), 0u);
  EXPECT_EQ(Stats().regions_registered(), 1u);
  h = absl::StatusOr<cubed::Handle>();
  t = absl::StatusOr<Tensor>();
  ASSERT_TRUE(client_->FlushReleases().ok());
  auto after = client_->GetMemoryUsage();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->bytes_in_use, before->bytes_in_use);
}

TEST_F(RegionTest, RangesOutsideTheRegionAndUnknownRegionsFailAndChangeNothing) {
  auto shared = std::make_shared<SharedMemory>(*SharedMemory::Create(4096));
  absl::StatusOr<Region> region = client_->RegisterRegion(shared);
  ASSERT_TRUE(region.ok()) << region.status();
  const auto before = client_->GetMemoryUsage();
  ASSERT_TRUE(before.ok());

  // Past the end (with an offset that would wrap if added unchecked): poisoned, reported by sync.
  absl::StatusOr<cubed::Handle> bad = client_->CreateFromRegion(*region, ~uint64_t{0} - 10, 100);
  ASSERT_TRUE(bad.ok());
  absl::Status synced = client_->Sync().get();
  EXPECT_EQ(synced.code(), absl::StatusCode::kInvalidArgument) << synced;
  EXPECT_TRUE(absl::StrContains(synced.message(), "exceed the region's 4096 bytes")) << synced;

  Region unknown{region->id ^ 1, shared};
  (void)client_->CreateFromRegion(unknown, 0, 16);
  synced = client_->Sync().get();
  EXPECT_EQ(synced.code(), absl::StatusCode::kNotFound) << synced;

  auto h = client_->Create(std::vector<uint8_t>(100, 1));
  ASSERT_TRUE(h.ok());
  auto small = client_->ReadIntoRegion({*h}, *region, 4000, 96).get();
  EXPECT_EQ(small.status().code(), absl::StatusCode::kInvalidArgument) << small.status();
  EXPECT_TRUE(absl::StrContains(small.status().message(), "bindings hold 100")) << small.status();
  auto outside = client_->ReadIntoRegion({*h}, *region, 4000, 100).get();
  EXPECT_EQ(outside.status().code(), absl::StatusCode::kInvalidArgument) << outside.status();

  {  // A region of another session is unknown there (its session closes at the scope's end).
    ClientOptions other_options;
    other_options.address = daemon_->unix_address();
    auto other = Client::Connect(other_options);
    ASSERT_TRUE(other.ok());
    auto foreign = (*other)->Create(std::vector<uint8_t>(16, 2));
    ASSERT_TRUE(foreign.ok());
    auto theirs = (*other)->ReadIntoRegion({*foreign}, *region, 0, 16).get();
    EXPECT_EQ(theirs.status().code(), absl::StatusCode::kNotFound) << theirs.status();
  }

  bad = absl::StatusOr<cubed::Handle>();
  (void)client_->Sync().get();
  h = absl::StatusOr<cubed::Handle>();
  ASSERT_TRUE(client_->FlushReleases().ok());
  auto after = client_->GetMemoryUsage();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->bytes_in_use, before->bytes_in_use);
}

TEST_F(RegionTest, HostileDescriptorsAreRefusedWithTheirReason) {
  char path[] = "/tmp/cubed-region-test-XXXXXX";
  const int file = mkstemp(path);
  ASSERT_GE(file, 0);
  unlink(path);
  ASSERT_EQ(ftruncate(file, 4096), 0);
  ExpectRefused(file, "is not sealable memory");
  ExpectRefused(Memfd(4096, 0), "not sealed against shrinking");
  ExpectRefused(Memfd(4096, 0, MFD_CLOEXEC), "not sealed against shrinking");  // F_SEAL_SEAL.
  ExpectRefused(Memfd(4096, F_SEAL_SHRINK | F_SEAL_WRITE), "sealed against writes");
  ExpectRefused(Memfd(0, F_SEAL_SHRINK), "has size 0");
  const int rw = Memfd(4096, F_SEAL_SHRINK);
  const int ro = open(absl::StrCat("/proc/self/fd/", rw).c_str(), O_RDONLY | O_CLOEXEC);
  close(rw);
  ExpectRefused(ro, "not open for reading and writing");
  int pipe_fds[2];
  ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
  close(pipe_fds[1]);
  ExpectRefused(pipe_fds[0], "is not sealable memory");
  // The client can never shrink sealed memory under the daemon's mapping.
  auto memory = SharedMemory::Create(8192);
  ASSERT_TRUE(memory.ok());
  EXPECT_NE(ftruncate(memory->fd(), 4096), 0);
  EXPECT_EQ(errno, EPERM);
}

TEST_F(RegionTest, MalformedRequestsAreAnswered) {
  const int fd = Memfd(4096, F_SEAL_SHRINK);
  cubed::v1::RegisterRegionResponse r = Raw(Request(client_->session()), {});
  EXPECT_EQ(r.code(), 3) << r.message();
  EXPECT_TRUE(absl::StrContains(r.message(), "exactly one file descriptor")) << r.message();
  r = Raw(Request(client_->session()), {fd, fd});
  EXPECT_EQ(r.code(), 3) << r.message();
  r = Raw("\xff\xff\xff", {fd});
  EXPECT_EQ(r.code(), 3) << r.message();
  EXPECT_TRUE(absl::StrContains(r.message(), "not a serialized")) << r.message();
  r = Raw(std::string(2000, 'x'), {fd});
  EXPECT_EQ(r.code(), 3) << r.message();
  r = Raw(Request(client_->session() ^ 0x100), {fd});  // Same device, no such session.
  EXPECT_EQ(r.code(), 5) << r.message();               // NOT_FOUND
  r = Raw(Request(client_->session() | 0xff), {fd});   // Device 255: none.
  EXPECT_EQ(r.code(), 5) << r.message();
  close(fd);
  EXPECT_EQ(RegionMappings(daemon_->pid()), 0);
  // The daemon serves on.
  EXPECT_TRUE(client_->GetMemoryUsage().ok());
}

TEST_F(RegionTest, RegionsOverTheLimitAreRefused) {
  Start({"--max_region_bytes=1MiB"});
  ExpectRefused(Memfd((1 << 20) + 1, F_SEAL_SHRINK), "over this daemon's limit");
  auto ok = SharedMemory::Create(1 << 20);
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(client_->RegisterRegion(std::make_shared<SharedMemory>(*std::move(ok))).ok());
  // The limit is on what one session holds, not only on each region: a second one is refused.
  auto second = SharedMemory::Create(4096);
  ASSERT_TRUE(second.ok());
  absl::StatusOr<Region> refused =
      client_->RegisterRegion(std::make_shared<SharedMemory>(*std::move(second)));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "--max_region_bytes"))
      << refused.status();
  EXPECT_EQ(RegionMappings(daemon_->pid()), 1) << "the refused region is not kept mapped";
}

TEST_F(RegionTest, TheSessionsEndUnmapsItsRegions) {
  std::vector<std::shared_ptr<SharedMemory>> kept;
  for (int i = 0; i < 3; ++i) {
    kept.push_back(std::make_shared<SharedMemory>(*SharedMemory::Create(4096 * (i + 1))));
    ASSERT_TRUE(client_->RegisterRegion(kept.back()).ok());
  }
  EXPECT_EQ(RegionMappings(daemon_->pid()), 3);
  client_.reset();  // Closes the stream, so the session.
  for (int i = 0; i < 100 && RegionMappings(daemon_->pid()) != 0; ++i) usleep(10000);
  EXPECT_EQ(RegionMappings(daemon_->pid()), 0);
}

// ClientOptions::region_threshold: ordinary Create / Read of large buffers go through a staging
// region on their own, and without a region socket through the stream.
TEST_F(RegionTest, AutomaticPathStagesLargeCreatesAndReads) {
  for (const char* flag : {"--max_region_bytes=16GiB", "--max_region_bytes=0"}) {
    Start({flag, "--memory_limit=32MiB"});
    ClientOptions o;
    o.address = daemon_->unix_address();  // Default region_threshold: 1 MiB.
    auto client = Client::Connect(o);
    ASSERT_TRUE(client.ok()) << client.status();
    std::vector<uint8_t> data((3 << 20) + 5);
    Fill(absl::MakeSpan(data), 11);
    auto h = (*client)->Create(data);
    ASSERT_TRUE(h.ok()) << h.status();
    auto t =
        (*client)->CreateTensor(absl::MakeConstSpan(data).subspan(0, 4 << 19), {2, 1 << 18}, 4);
    ASSERT_TRUE(t.ok()) << t.status();
    auto read = (*client)->Read({Binding(*h), Binding(*h, 1, 1)}).get();
    ASSERT_TRUE(read.ok()) << read.status();
    ASSERT_EQ(read->size(), 2u);
    ASSERT_EQ((*read)[0].size(), data.size());
    EXPECT_EQ(std::memcmp((*read)[0].data(), data.data(), data.size()), 0);
    EXPECT_EQ((*read)[1].size(), data.size() - 2);
    EXPECT_EQ(std::memcmp((*read)[1].data(), data.data() + 1, data.size() - 2), 0);
    auto packed = (*client)->ReadTensor({*t}).get();
    ASSERT_TRUE(packed.ok()) << packed.status();
    EXPECT_EQ(std::memcmp((*packed)[0].data(), data.data(), 4 << 19), 0);
    const bool regions = std::string(flag) != "--max_region_bytes=0";
    EXPECT_EQ(RegionMappings(daemon_->pid()), regions ? 1 : 0) << flag;
    // A create the daemon refuses: through the staging region it fails at the next sync, as a
    // create on the stream does; through the chunked upload (no regions) Create returns it.
    auto too_big = (*client)->Create(std::vector<uint8_t>(40 << 20, 1));
    absl::Status failed = regions ? (*client)->Sync().get() : too_big.status();
    EXPECT_TRUE(!regions || too_big.ok()) << too_big.status();
    EXPECT_EQ(failed.code(), absl::StatusCode::kResourceExhausted) << failed;
    EXPECT_TRUE(absl::StrContains(failed.message(), "(create) failed")) << failed;
  }
}

// Several sessions with regions at once, each round-tripping its own bytes on its own thread.
TEST_F(RegionTest, ConcurrentSessionsKeepTheirBytesApart) {
  constexpr int kClients = 4;
  std::vector<std::thread> threads;
  std::vector<std::string> errors(kClients);
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      ClientOptions o;
      o.address = daemon_->unix_address();
      auto client = Client::Connect(o);
      if (!client.ok()) {
        errors[c] = client.status().ToString();
        return;
      }
      auto shared = std::make_shared<SharedMemory>(*SharedMemory::Create(2 << 20));
      absl::StatusOr<Region> region = (*client)->RegisterRegion(shared);
      if (!region.ok()) {
        errors[c] = region.status().ToString();
        return;
      }
      for (int round = 0; round < 20; ++round) {
        Fill(shared->bytes().subspan(0, 1 << 20), static_cast<uint8_t>(c * 50 + round));
        auto h = (*client)->CreateFromRegion(*region, 0, 1 << 20);
        auto n = h.ok() ? (*client)->ReadIntoRegion({*h}, *region, 1 << 20, 1 << 20).get()
                        : absl::StatusOr<uint64_t>(h.status());
        if (!n.ok() ||
            std::memcmp(shared->bytes().data(), shared->bytes().data() + (1 << 20), 1 << 20) != 0) {
          errors[c] = absl::StrCat("round ", round, ": ", n.status().ToString());
          return;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int c = 0; c < kClients; ++c) EXPECT_EQ(errors[c], "") << "client " << c;
  for (int i = 0; i < 100 && RegionMappings(daemon_->pid()) != 0; ++i) usleep(10000);
  EXPECT_EQ(RegionMappings(daemon_->pid()), 0);
}

// The child half of AKilledClientLeavesNothingBehind: registers a region, creates from it and
// says so on stdout, then waits to be killed. Skips unless run as that child.
TEST(RegionChild, RegisterThenWaitForTheKill) {
  const char* address = std::getenv("CUBED_REGION_CHILD_ADDRESS");
  if (address == nullptr) GTEST_SKIP() << "run by AKilledClientLeavesNothingBehind only";
  ClientOptions o;
  o.address = address;
  auto client = Client::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status();
  auto shared = std::make_shared<SharedMemory>(*SharedMemory::Create(4 << 20));
  absl::StatusOr<Region> region = (*client)->RegisterRegion(shared);
  ASSERT_TRUE(region.ok()) << region.status();
  auto h = (*client)->CreateFromRegion(*region, 0, 4 << 20);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE((*client)->Sync().get().ok());
  std::printf("ready\n");
  std::fflush(stdout);
  pause();
}

// kill -9 of a client: the daemon notices the stream's end, closes the session, and its region
// mapping, allocation and session are all gone.
TEST_F(RegionTest, AKilledClientLeavesNothingBehind) {
  const auto before = client_->GetMemoryUsage();
  ASSERT_TRUE(before.ok());
  absl::StatusOr<pid_t> started = cubed::testing::StartReadyChild(
      "RegionChild.*", "CUBED_REGION_CHILD_ADDRESS", daemon_->unix_address());
  ASSERT_TRUE(started.ok()) << started.status();
  const pid_t child = *started;
  EXPECT_EQ(RegionMappings(daemon_->pid()), 1);
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) {
    auto usage = client_->GetMemoryUsage();
    gone = RegionMappings(daemon_->pid()) == 0 && usage.ok() &&
           usage->bytes_in_use == before->bytes_in_use;
    if (!gone) usleep(10000);
  }
  EXPECT_TRUE(gone) << "mappings " << RegionMappings(daemon_->pid());
  EXPECT_EQ(Stats().sessions(), 1u) << "only this test's own session is left";
}

TEST_F(RegionTest, AClientThatUnmapsItsMemoryFailsNothingOfTheDaemons) {
  // Register memory, then give up this process's mapping: the daemon's mapping stays valid (the
  // memfd lives while anything maps it) and reads still land in it.
  const int fd = Memfd(1 << 16, F_SEAL_SHRINK);
  void* mine = mmap(nullptr, 1 << 16, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(mine, MAP_FAILED);
  cubed::v1::RegisterRegionResponse registered = Raw(Request(client_->session()), {fd});
  ASSERT_EQ(registered.code(), 0) << registered.message();
  ASSERT_EQ(munmap(mine, 1 << 16), 0);
  auto h = client_->Create(std::vector<uint8_t>(1000, 9));
  ASSERT_TRUE(h.ok());
  const Region region{registered.region(), nullptr};
  auto written = client_->ReadIntoRegion({*h}, region, 0, 1000).get();
  ASSERT_TRUE(written.ok()) << written.status();
  void* again = mmap(nullptr, 1000, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(again, MAP_FAILED);
  EXPECT_EQ(static_cast<uint8_t*>(again)[999], 9);
  munmap(again, 1000);
  close(fd);
}

}  // namespace
