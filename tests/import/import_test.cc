// Imported memory on the CPU backend through the C++ SDK (Client::ImportRegion; docs/api.md,
// "Importing memory"; Note [Imported memory], server/compute/compute_server.h) against the real
// daemon: the handle is the region's bytes in place both ways, never counted as the pools'
// memory but shown by the import gauges; every refusal names what was wrong and leaves nothing;
// the region stays mapped, and the SDK keeps it, until the handle's release was processed
// (Note [Import keep-alive], client/release_batcher.h); cubectl memory, stats and top show it;
// and a producer process that is killed
// while the daemon maps its memory leaves the daemon serving and, once the session goes,
// nothing behind.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
#include "client/shared_memory.h"
#include "cubed/v1/compute.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/testing/child_test.h"
#include "tests/testing/daemon_process.h"

namespace {

using ::cubed::Builtin;
using ::cubed::Client;
using ::cubed::ClientOptions;
using ::cubed::ElemType;
using ::cubed::Handle;
using ::cubed::Region;
using ::cubed::SharedMemory;
using ::cubed::Tensor;
using ::cubed::testing::DaemonProcess;

// Mappings of memfd regions in the daemon (command rings are not regions).
int RegionMappings(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/maps"));
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    n += absl::StrContains(line, "memfd:") && !absl::StrContains(line, "memfd:cubed-ring") ? 1 : 0;
  }
  return n;
}

std::shared_ptr<SharedMemory> Memory(uint64_t size) {
  absl::StatusOr<SharedMemory> m = SharedMemory::Create(size, "cubed-import-test");
  EXPECT_TRUE(m.ok()) << m.status();
  auto memory = std::make_shared<SharedMemory>(*std::move(m));
  for (uint64_t i = 0; i < size; ++i) memory->bytes()[i] = static_cast<uint8_t>(i % 251);
  return memory;
}

std::string Pattern(uint64_t offset, uint64_t size) {
  std::string s(size, '\0');
  for (uint64_t i = 0; i < size; ++i) s[i] = static_cast<char>((offset + i) % 251);
  return s;
}

// Polls `done` for up to 5 s.
template <typename F>
bool Eventually(F done) {
  for (int i = 0; i < 500; ++i) {
    if (done()) return true;
    usleep(10000);
  }
  return done();
}

ClientOptions StreamOptions(const std::string& address) {
  ClientOptions c;
  c.address = address;
  c.transport = cubed::Transport::kStream;
  c.region_threshold = 0;  // Only the test's own regions.
  return c;
}

class ImportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("CUBED_CLIENT_TRANSPORT", "stream", 1);  // Regions need the session stream.
    DaemonProcess::Options options;
    options.backend = "cpu";  // Region imports are the CPU backend's (CUDA: tests/cuda).
    auto daemon = DaemonProcess::Start(options);
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
    channel_ = grpc::CreateChannel(daemon_->unix_address(), grpc::InsecureChannelCredentials());
    stub_ = cubed::v1::Compute::NewStub(channel_);
    auto client = Client::Connect(StreamOptions(daemon_->unix_address()));
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }
  void TearDown() override {
    client_.reset();  // Before its daemon.
    daemon_.reset();
  }

  cubed::v1::GetStatsResponse AllStats() {
    grpc::ClientContext context;
    cubed::v1::GetStatsResponse response;
    grpc::Status s = stub_->GetStats(&context, cubed::v1::GetStatsRequest(), &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response;
  }
  cubed::v1::DeviceStats Stats() {
    cubed::v1::GetStatsResponse all = AllStats();
    return all.devices_size() > 0 ? all.devices(0) : cubed::v1::DeviceStats();
  }
  cubed::v1::MemoryUsageResponse Usage() {
    grpc::ClientContext context;
    cubed::v1::MemoryUsageResponse response;
    EXPECT_TRUE(stub_->MemoryUsage(&context, cubed::v1::MemoryUsageRequest(), &response).ok());
    return response;
  }
  bool Serving() {
    auto health = grpc::health::v1::Health::NewStub(channel_);
    grpc::ClientContext context;
    grpc::health::v1::HealthCheckResponse response;
    return health->Check(&context, grpc::health::v1::HealthCheckRequest(), &response).ok() &&
           response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  }
  // A fresh allocation, written and read back: the daemon still serves.
  void ExpectRoundTrip() {
    auto h = client_->Create({1, 2, 3, 4, 5});
    ASSERT_TRUE(h.ok()) << h.status();
    auto read = client_->Read({*h}).get();
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ((*read)[0], std::string("\1\2\3\4\5", 5));
  }

  std::unique_ptr<DaemonProcess> daemon_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<cubed::v1::Compute::Stub> stub_;
  std::unique_ptr<Client> client_;
};

TEST_F(ImportTest, TheImportIsTheRegionsBytesInPlaceAndNotThePoolsMemory) {
  std::shared_ptr<SharedMemory> memory = Memory(1 << 16);
  auto region = client_->RegisterRegion(memory);
  ASSERT_TRUE(region.ok()) << region.status();
  const cubed::v1::MemoryUsageResponse before = Usage();
  EXPECT_EQ(before.imported_bytes(), 0u);

  auto h = client_->ImportRegion(*region, 4096, 1024);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->size(), 1024u);
  auto read = client_->Read({*h}).get();
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ((*read)[0], Pattern(4096, 1024));

  // This process's writes show in the handle without any call...
  std::memset(memory->bytes().data() + 4096, 7, 16);
  read = client_->Read({cubed::Binding(*h, 0, 1024 - 16)}).get();
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ((*read)[0], std::string(16, '\7'));
  // ... and a kernel writing the handle writes the region: 256 f32 of 1.5 + 1.5.
  Tensor out{*h, {256}, {1}, 4};
  std::vector<uint8_t> halves(256 * 4);
  const float half = 1.5f;
  for (size_t i = 0; i < 256; ++i) std::memcpy(&halves[i * 4], &half, 4);
  auto x = client_->CreateTensor(halves, {256}, 4);
  ASSERT_TRUE(x.ok()) << x.status();
  ASSERT_TRUE(client_->Execute(Builtin("add", ElemType::kF32), {*x, *x}, {out}).ok());
  ASSERT_TRUE(client_->Sync().get().ok());
  for (size_t i = 0; i < 256; ++i) {
    float v = 0;
    std::memcpy(&v, memory->bytes().data() + 4096 + i * 4, 4);
    ASSERT_EQ(v, 3.0f) << "element " << i;
  }

  // Not the pools' memory: MemoryUsage is as before but for the input tensor; the gauges show it.
  const cubed::v1::MemoryUsageResponse during = Usage();
  EXPECT_EQ(during.usage().number_allocs(), before.usage().number_allocs() + 1);
  EXPECT_EQ(during.imported_bytes(), 1024u);
  EXPECT_EQ(during.imported_buffers(), 1u);
  cubed::v1::GetStatsResponse all = AllStats();
  ASSERT_EQ(all.devices_size(), 1);
  EXPECT_EQ(all.devices(0).imported_bytes(), 1024u);
  EXPECT_EQ(all.devices(0).imported_buffers(), 1u);
  ASSERT_EQ(all.devices(0).session_stats_size(), 1);
  EXPECT_EQ(all.devices(0).session_stats(0).imported_bytes(), 1024u);
  EXPECT_EQ(all.devices(0).session_stats(0).bytes(), 1024u + 1024u);  // The quota counts it.

  // A second import of the same range aliases the first.
  auto alias = client_->ImportRegion(*region, 4096, 1024);
  ASSERT_TRUE(alias.ok()) << alias.status();
  read = client_->Read({*alias}).get();
  ASSERT_TRUE(read.ok());
  EXPECT_EQ((*read)[0].substr(0, 4), std::string("\0\0\x40\x40", 4));  // 3.0f.
  EXPECT_EQ(Usage().imported_buffers(), 2u);

  *h = Handle();
  *alias = Handle();
  *x = Tensor();
  out = Tensor();
  ASSERT_TRUE(client_->FlushReleases().ok());
  const cubed::v1::MemoryUsageResponse after = Usage();
  EXPECT_EQ(after.imported_bytes(), 0u);
  EXPECT_EQ(after.imported_buffers(), 0u);
  EXPECT_EQ(after.usage().bytes_in_use(), before.usage().bytes_in_use());
}

// stdout of `cubectl --address=ADDRESS ARGS`; fails the test unless it exits 0.
std::string Cubectl(const std::string& address, const std::string& args) {
  const char* binary = getenv("CUBECTL_BINARY");  // Where the build tree moved.
  const std::string command = absl::StrCat(binary != nullptr ? binary : CUBECTL_BINARY_PATH,
                                           " --address=", address, " ", args, " 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), pipe)) out.append(buf, n);
  EXPECT_EQ(pclose(pipe), 0) << command << ": " << out;
  return out;
}

// What cubectl shows where it shows memory: the import beside the pools' figures, per device
// and (top --sessions) per session.
TEST_F(ImportTest, CubectlShowsImportedMemoryBesideThePools) {
  std::shared_ptr<SharedMemory> memory = Memory(1 << 16);
  auto region = client_->RegisterRegion(memory);
  ASSERT_TRUE(region.ok()) << region.status();
  auto h = client_->ImportRegion(*region, 0, 3000);
  ASSERT_TRUE(h.ok()) << h.status();
  const std::string address = daemon_->unix_address();
  const cubed::v1::MemoryUsageResponse usage = Usage();

  std::string out = Cubectl(address, "--json memory");
  EXPECT_EQ(out, absl::StrCat("{\"number_allocs\": ", usage.usage().number_allocs(),
                              ", \"bytes_in_use\": ", usage.usage().bytes_in_use(),
                              ", \"bytes_padding\": ", usage.usage().bytes_padding(),
                              ", \"bytes_reserved\": ", usage.usage().bytes_reserved(),
                              ", \"imported_bytes\": 3000, \"imported_buffers\": 1}\n"));
  out = Cubectl(address, "memory");
  EXPECT_TRUE(absl::StrContains(out, "imported_bytes    2.93 KiB (3000 bytes)")) << out;
  EXPECT_TRUE(absl::StrContains(out, "imported_buffers  1")) << out;

  out = Cubectl(address, "--json top --sessions --count=1 --interval=10ms");
  EXPECT_TRUE(absl::StrContains(out, "\"imported_bytes\": 3000, \"imported_buffers\": 1, ")) << out;
  EXPECT_TRUE(absl::StrContains(out, "\"bytes\": 3000, \"imported_bytes\": 3000, ")) << out;
  out = Cubectl(address, "top --sessions --count=1 --interval=10ms");
  EXPECT_TRUE(absl::StrContains(out, " imported ")) << out;
  EXPECT_TRUE(absl::StrContains(out, "2.93 KiB")) << out;

  out = Cubectl(address, "--json stats");
  EXPECT_TRUE(absl::StrContains(out, "\"imported_bytes\":\"3000\",\"imported_buffers\":\"1\""))
      << out;
  out = Cubectl(address, "stats");
  EXPECT_TRUE(absl::StrContains(out, "device 0 imported      2.93 KiB in 1 imports")) << out;

  *h = Handle();
  ASSERT_TRUE(client_->FlushReleases().ok());
  EXPECT_TRUE(absl::StrContains(Cubectl(address, "--json memory"),
                                "\"imported_bytes\": 0, \"imported_buffers\": 0}"));
}

// Note [Import keep-alive]: the region may be released at once; the daemon keeps its mapping
// while the handle lives, and the SDK keeps this process's until the release was processed.
TEST_F(ImportTest, TheRegionStaysMappedUntilTheHandlesReleaseWasProcessed) {
  std::shared_ptr<SharedMemory> memory = Memory(8192);
  std::weak_ptr<SharedMemory> watch = memory;
  auto region = client_->RegisterRegion(std::move(memory));
  ASSERT_TRUE(region.ok()) << region.status();
  auto h = client_->ImportRegion(*region, 0, 8192);
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_TRUE(client_->ReleaseRegion(*region).ok());
  *region = Region();
  ASSERT_TRUE(client_->Sync().get().ok());
  EXPECT_EQ(Stats().regions(), 0u) << "the registration is gone";
  EXPECT_EQ(RegionMappings(daemon_->pid()), 1) << "the import keeps the daemon's mapping";
  EXPECT_FALSE(watch.expired()) << "the handle holds this process's mapping";
  auto read = client_->Read({cubed::Binding(*h, 100, 8192 - 200)}).get();
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ((*read)[0], Pattern(100, 100));

  *h = Handle();  // The release is queued, not yet processed: the memory stays.
  EXPECT_FALSE(watch.expired());
  ASSERT_TRUE(client_->FlushReleases().ok());
  EXPECT_TRUE(watch.expired()) << "FlushReleases drops what the processed release held";
  EXPECT_EQ(RegionMappings(daemon_->pid()), 0);
  EXPECT_EQ(Usage().imported_buffers(), 0u);
}

TEST_F(ImportTest, RefusalsNameWhatWasWrongAndLeaveNothing) {
  std::shared_ptr<SharedMemory> memory = Memory(4096);
  auto region = client_->RegisterRegion(memory);
  ASSERT_TRUE(region.ok()) << region.status();
  const uint64_t handles = Stats().handles();
  auto refused = [&](absl::StatusOr<Handle> h, absl::StatusCode code, const std::string& why) {
    EXPECT_EQ(h.status().code(), code) << h.status();
    EXPECT_TRUE(absl::StrContains(h.status().message(), why)) << h.status();
  };
  refused(client_->ImportRegion(*region, 0, 0), absl::StatusCode::kInvalidArgument, "size");
  refused(client_->ImportRegion(*region, 4000, 97), absl::StatusCode::kInvalidArgument, "4096");
  refused(client_->ImportRegion(*region, uint64_t{1} << 63, uint64_t{1} << 63),
          absl::StatusCode::kInvalidArgument, "region");
  refused(client_->ImportRegion(Region{region->id + 100, memory}, 0, 16),
          absl::StatusCode::kNotFound, "region");
  // Released before, in stream order: the import runs after the release.
  ASSERT_TRUE(client_->ReleaseRegion(*region).ok());
  refused(client_->ImportRegion(*region, 0, 16), absl::StatusCode::kNotFound, "region");
  // CUDA memory on the CPU backend.
  cubed::CudaIpcMemory ipc;
  ipc.ipc_handle = std::string(64, 'x');
  ipc.size = 16;
  ipc.device_uuid = "GPU-00000000-0000-0000-0000-000000000000";
  refused(client_->ImportCudaIpc(ipc), absl::StatusCode::kUnimplemented,
          "cpu backend cannot import CUDA memory");
  // Every refusal names the RPC.
  refused(client_->ImportRegion(*region, 0, 16), absl::StatusCode::kNotFound, "ImportMemory");

  EXPECT_EQ(Stats().handles(), handles);
  EXPECT_EQ(Usage().imported_buffers(), 0u);
  EXPECT_EQ(RegionMappings(daemon_->pid()), 0);
  ExpectRoundTrip();

  // Without the session stream there are no regions.
  ClientOptions unary = StreamOptions(daemon_->unix_address());
  unary.transport = cubed::Transport::kUnary;
  setenv("CUBED_CLIENT_TRANSPORT", "unary", 1);
  auto plain = Client::Connect(unary);
  ASSERT_TRUE(plain.ok()) << plain.status();
  refused((*plain)->ImportRegion(Region{1, memory}, 0, 16), absl::StatusCode::kFailedPrecondition,
          "session stream");
}

// The producer of ImportTest.AKilledProducerLeavesTheDaemonServingAndNothingBehind: imports its
// own region in its own session, reads it through the daemon, then waits to be killed.
TEST(ImportChild, ProducerWithItsOwnSession) {
  const char* address = getenv("CUBED_IMPORT_CHILD_ADDRESS");
  if (address == nullptr) GTEST_SKIP() << "runs as a child of AKilledProducer...";
  setenv("CUBED_CLIENT_TRANSPORT", "stream", 1);
  auto client = Client::Connect(StreamOptions(address));
  ASSERT_TRUE(client.ok()) << client.status();
  std::shared_ptr<SharedMemory> memory = Memory(1 << 16);
  auto region = (*client)->RegisterRegion(memory);
  ASSERT_TRUE(region.ok()) << region.status();
  auto h = (*client)->ImportRegion(*region, 0, 1 << 16);
  ASSERT_TRUE(h.ok()) << h.status();
  auto read = (*client)->Read({*h}).get();  // The daemon has it mapped and reads it.
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ((*read)[0], Pattern(0, 1 << 16));
  std::printf("ready\n");
  std::fflush(stdout);
  pause();
}

TEST_F(ImportTest, AKilledProducerLeavesTheDaemonServingAndNothingBehind) {
  const cubed::v1::MemoryUsageResponse before = Usage();
  absl::StatusOr<pid_t> child =
      cubed::testing::StartReadyChild("ImportChild.ProducerWithItsOwnSession",
                                      "CUBED_IMPORT_CHILD_ADDRESS", daemon_->unix_address());
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(Usage().imported_buffers(), 1u);
  EXPECT_EQ(Usage().imported_bytes(), uint64_t{1} << 16);
  EXPECT_EQ(RegionMappings(daemon_->pid()), 1);
  EXPECT_EQ(Stats().sessions(), 2u);

  kill(*child, SIGKILL);
  int status = 0;
  waitpid(*child, &status, 0);
  // The stream's end closes the producer's session, which drops the import and the region.
  EXPECT_TRUE(Eventually([&] {
    return Usage().imported_buffers() == 0 && RegionMappings(daemon_->pid()) == 0 &&
           Stats().sessions() == 1;
  })) << "imports "
      << Usage().imported_buffers() << ", mappings " << RegionMappings(daemon_->pid())
      << ", sessions " << Stats().sessions();
  EXPECT_EQ(Usage().usage().bytes_in_use(), before.usage().bytes_in_use());
  EXPECT_EQ(Usage().imported_bytes(), 0u);
  EXPECT_TRUE(Serving());
  ExpectRoundTrip();
}

// The producer of ImportTest.AProducersImportOutlivesItInASessionThatGoesOn: registers a region
// of its own memory with another process's session, imports a range of it there, writes the
// handle's id to a file, and waits to be killed. CUBED_IMPORT_CHILD_SESSION is
// "ADDRESS SESSION FILE".
TEST(ImportChild, ProducerInAnotherSession) {
  const char* env = getenv("CUBED_IMPORT_CHILD_SESSION");
  if (env == nullptr) GTEST_SKIP() << "runs as a child of AProducersImport...";
  std::vector<std::string> args = absl::StrSplit(env, ' ');
  ASSERT_EQ(args.size(), 3u);
  uint64_t session = 0;
  ASSERT_TRUE(absl::SimpleAtoi(args[1], &session));
  std::shared_ptr<SharedMemory> memory = Memory(1 << 16);
  auto region =
      cubed::RegisterSharedMemory(absl::StrCat(args[0].substr(5), ".regions"), session, *memory);
  ASSERT_TRUE(region.ok()) << region.status();
  auto stub =
      cubed::v1::Compute::NewStub(grpc::CreateChannel(args[0], grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  cubed::v1::ImportMemoryRequest request;
  request.set_session(session);
  request.mutable_region()->set_region(*region);
  request.mutable_region()->set_offset(1024);
  request.mutable_region()->set_size(4096);
  cubed::v1::ImportMemoryResponse response;
  grpc::Status s = stub->ImportMemory(&context, request, &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  std::ofstream(args[2]) << response.handle();
  std::printf("ready\n");
  std::fflush(stdout);
  pause();
}

// The session outlives its producer (as one that `cubectl session open` made): the daemon's
// mapping keeps the killed producer's memory, which the handle still reads and writes, until
// the session closes.
TEST_F(ImportTest, AProducersImportOutlivesItInASessionThatGoesOn) {
  uint64_t session = 0;
  {
    grpc::ClientContext context;
    cubed::v1::OpenSessionRequest request;
    request.set_lease_ms(60000);
    cubed::v1::OpenSessionResponse response;
    ASSERT_TRUE(stub_->OpenSession(&context, request, &response).ok());
    session = response.session();
  }
  const std::string file = absl::StrCat(::testing::TempDir(), "/cubed-import-", getpid());
  absl::StatusOr<pid_t> child = cubed::testing::StartReadyChild(
      "ImportChild.ProducerInAnotherSession", "CUBED_IMPORT_CHILD_SESSION",
      absl::StrCat(daemon_->unix_address(), " ", session, " ", file));
  ASSERT_TRUE(child.ok()) << child.status();
  kill(*child, SIGKILL);
  int status = 0;
  waitpid(*child, &status, 0);
  uint64_t id = 0;
  std::ifstream(file) >> id;
  std::remove(file.c_str());
  ASSERT_NE(id, 0u);
  EXPECT_EQ(Usage().imported_buffers(), 1u);
  EXPECT_EQ(RegionMappings(daemon_->pid()), 1);

  // Join the session (unary) and use the dead producer's memory.
  ClientOptions join = StreamOptions(daemon_->unix_address());
  join.session = session;
  auto joined = Client::Connect(join);
  ASSERT_TRUE(joined.ok()) << joined.status();
  Handle h = (*joined)->Adopt(id, 4096);
  auto read = (*joined)->Read({h}).get();
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ((*read)[0], Pattern(1024, 4096));
  Tensor t{h, {1024}, {1}, 4};
  cubed::Scalars two;
  two.floats = {2.0};
  ASSERT_TRUE((*joined)->Execute(Builtin("fill", ElemType::kF32), {}, {t}, {two}).ok());
  read = (*joined)->Read({cubed::Binding(h, 0, 4092)}).get();
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ((*read)[0], std::string("\0\0\0\x40", 4));
  h.Detach();  // The session's close releases it.
  joined->reset();
  EXPECT_TRUE(Serving());

  {
    grpc::ClientContext context;
    cubed::v1::CloseSessionRequest request;
    request.set_session(session);
    cubed::v1::CloseSessionResponse response;
    ASSERT_TRUE(stub_->CloseSession(&context, request, &response).ok());
    EXPECT_EQ(response.handles_released(), 1u);
  }
  EXPECT_EQ(Usage().imported_buffers(), 0u);
  EXPECT_EQ(RegionMappings(daemon_->pid()), 0);
  ExpectRoundTrip();
}

}  // namespace
