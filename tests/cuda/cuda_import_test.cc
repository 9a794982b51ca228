// Imported CUDA memory through the C++ SDK (Client::ImportCudaIpc; docs/api.md, "Importing
// memory"; Note [Imported memory], server/compute/compute_server.h) against the real daemon with
// the CUDA backend. The producer is cubed_cuda_ipc_exporter, another process as torch or CuPy
// would be: the handle is its memory both ways, outside the pools, shown by the gauges; the
// SDK keeps the keep-alive until the release was processed (Note [Import keep-alive]); every
// refusal names what was wrong and leaves nothing; and a producer killed while the daemon maps
// its memory leaves the daemon serving, its device not lost, and nothing behind once released.
// Skips without a device.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "client/client.h"
#include "client/shared_memory.h"
#include "cubed/v1/compute.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/compute/cuda/cuda_test_util.h"
#include "tests/testing/daemon_process.h"

namespace cubed {
namespace {

using ::cubed::testing::DaemonProcess;

std::string Pattern(uint64_t offset, uint64_t size) {
  std::string s(size, '\0');
  for (uint64_t i = 0; i < size; ++i) s[i] = static_cast<char>((offset + i) % 251);
  return s;
}

// cubed_cuda_ipc_exporter SIZE GO_FILE as a child process: its allocation's IPC handle, then
// (after Go) its memory as it last saw it.
class Exporter {
 public:
  static std::unique_ptr<Exporter> Start(uint64_t size) {
    auto e = std::unique_ptr<Exporter>(new Exporter());
    e->go_ = absl::StrCat(::testing::TempDir(), "/cubed-import-go-", getpid(), "-", size);
    std::remove(e->go_.c_str());
    int out[2];
    if (pipe(out) != 0) return nullptr;
    const char* path = getenv("CUBED_CUDA_IPC_EXPORTER");  // Where the build tree moved.
    const std::string binary = path != nullptr ? path : CUBED_CUDA_IPC_EXPORTER;
    const std::string size_arg = absl::StrCat(size);
    e->pid_ = fork();
    if (e->pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      dup2(out[1], STDERR_FILENO);
      execl(binary.c_str(), binary.c_str(), size_arg.c_str(), e->go_.c_str(), nullptr);
      _exit(127);
    }
    close(out[1]);
    e->out_ = fdopen(out[0], "r");
    char line[512] = {0};
    if (fgets(line, sizeof(line), e->out_) != nullptr) {
      e->first_line_ = std::string(absl::StripAsciiWhitespace(line));
      e->handle_ = absl::HexStringToBytes(e->first_line_);
    }
    return e;
  }
  ~Exporter() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_ != nullptr) fclose(out_);
    std::remove(go_.c_str());
  }

  // The 64 handle bytes; anything else means the exporter could not share memory.
  const std::string& handle() const { return handle_; }
  const std::string& first_line() const { return first_line_; }
  // Lets it print its memory and exit; returns what it printed and its exit status.
  std::pair<std::string, int> Finish() {
    std::fclose(std::fopen(go_.c_str(), "w"));
    std::string output;
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof(buf), out_)) output.append(buf, n);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return {output, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)};
  }
  // SIGKILL, as a producer that crashes: the driver tears its context down with its memory.
  void Kill() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  Exporter() = default;
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
  std::string go_;
  std::string first_line_;
  std::string handle_;
};

class CudaImportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CUBED_SKIP_WITHOUT_CUDA();
    DaemonProcess::Options options;
    options.backend = "cuda";
    auto daemon = DaemonProcess::Start(options);
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
    channel_ = grpc::CreateChannel(daemon_->unix_address(), grpc::InsecureChannelCredentials());
    stub_ = v1::Compute::NewStub(channel_);
    ClientOptions c;
    c.address = daemon_->unix_address();
    auto client = Client::Connect(c);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
    auto info = client_->GetInfo();
    ASSERT_TRUE(info.ok()) << info.status();
    uuid_ = info->device.uuid();
  }
  void TearDown() override {
    client_.reset();
    if (daemon_ != nullptr) {
      // Every test ends with a daemon that serves and stops cleanly: no lost device.
      absl::StatusOr<int> stopped = daemon_->Stop(SIGTERM);
      EXPECT_TRUE(stopped.ok() && *stopped == 0)
          << (stopped.ok() ? absl::StrCat("exit ", *stopped) : stopped.status().ToString()) << "\n"
          << daemon_->LogTail();
    }
    daemon_.reset();
  }

  v1::MemoryUsageResponse Usage() {
    grpc::ClientContext context;
    v1::MemoryUsageResponse response;
    EXPECT_TRUE(stub_->MemoryUsage(&context, v1::MemoryUsageRequest(), &response).ok());
    return response;
  }
  bool Serving() {
    auto health = grpc::health::v1::Health::NewStub(channel_);
    grpc::ClientContext context;
    grpc::health::v1::HealthCheckResponse response;
    return health->Check(&context, grpc::health::v1::HealthCheckRequest(), &response).ok() &&
           response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  }
  void ExpectRoundTrip() {
    auto h = client_->Create({1, 2, 3, 4, 5});
    ASSERT_TRUE(h.ok()) << h.status();
    auto read = client_->Read({*h}).get();
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ((*read)[0], std::string("\1\2\3\4\5", 5));
  }

  std::unique_ptr<DaemonProcess> daemon_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Compute::Stub> stub_;
  std::unique_ptr<Client> client_;
  std::string uuid_;
};

TEST_F(CudaImportTest, TheImportIsTheProducersMemoryBothWays) {
  std::unique_ptr<Exporter> producer = Exporter::Start(4096);
  ASSERT_NE(producer, nullptr);
  ASSERT_EQ(producer->handle().size(), 64u) << "the exporter failed: " << producer->first_line();
  const v1::MemoryUsageResponse before = Usage();

  auto keep = std::make_shared<int>(1);  // Stands for the producer's tensor object.
  std::weak_ptr<int> watch = keep;
  auto h = client_->ImportCudaIpc({producer->handle(), 512, 1024, uuid_}, std::move(keep));
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->size(), 1024u);
  auto read = client_->Read({*h}).get();
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ((*read)[0], Pattern(512, 1024));
  const v1::MemoryUsageResponse during = Usage();
  EXPECT_EQ(during.usage().bytes_in_use(), before.usage().bytes_in_use()) << "not the pools'";
  EXPECT_EQ(during.imported_bytes(), 1024u);
  EXPECT_EQ(during.imported_buffers(), 1u);

  // The daemon writes the producer's memory: 2.0f over the whole range.
  Tensor t{*h, {256}, {1}, 4};
  Scalars two;
  two.floats = {2.0};
  ASSERT_TRUE(client_->Execute(Builtin("fill", ElemType::kF32), {}, {t}, {two}).ok());
  ASSERT_TRUE(client_->Sync().get().ok());

  *h = Handle();
  t = Tensor();
  EXPECT_FALSE(watch.expired()) << "kept until the daemon processed the release";
  ASSERT_TRUE(client_->FlushReleases().ok());
  EXPECT_TRUE(watch.expired());
  EXPECT_EQ(Usage().imported_buffers(), 0u);
  EXPECT_EQ(Usage().imported_bytes(), 0u);

  auto [output, status] = producer->Finish();
  EXPECT_EQ(status, 0) << output;
  std::string expect = Pattern(0, 4096);
  for (int i = 0; i < 256; ++i) expect.replace(512 + i * 4, 4, std::string("\0\0\0\x40", 4));
  EXPECT_EQ(output, absl::BytesToHexString(expect) + "\n");
  EXPECT_TRUE(Serving());
}

TEST_F(CudaImportTest, RefusalsNameWhatWasWrongAndLeaveNothing) {
  std::unique_ptr<Exporter> producer = Exporter::Start(4096);
  ASSERT_NE(producer, nullptr);
  ASSERT_EQ(producer->handle().size(), 64u) << "the exporter failed: " << producer->first_line();
  auto refused = [&](const CudaIpcMemory& m, absl::StatusCode code, const std::string& why) {
    absl::StatusOr<Handle> h = client_->ImportCudaIpc(m);
    EXPECT_EQ(h.status().code(), code) << h.status();
    EXPECT_TRUE(absl::StrContains(h.status().message(), why)) << h.status();
  };
  refused({producer->handle().substr(0, 63), 0, 16, uuid_}, absl::StatusCode::kInvalidArgument,
          "63 bytes");
  refused({producer->handle(), 0, 0, uuid_}, absl::StatusCode::kInvalidArgument, "size: 0");
  refused({producer->handle(), 0, 16, "GPU-00000000-0000-0000-0000-000000000000"},
          absl::StatusCode::kInvalidArgument, "device_uuid");
  refused({producer->handle(), 4000, 4096, uuid_}, absl::StatusCode::kInvalidArgument, "exceeds");
  refused({std::string(64, '\x5a'), 0, 16, uuid_}, absl::StatusCode::kInvalidArgument,
          "cannot open it");
  // A region's range is the CPU backend's kind of import.
  auto memory = SharedMemory::Create(4096);
  ASSERT_TRUE(memory.ok());
  auto region = client_->RegisterRegion(std::make_shared<SharedMemory>(*std::move(memory)));
  ASSERT_TRUE(region.ok()) << region.status();
  absl::StatusOr<Handle> h = client_->ImportRegion(*region, 0, 16);
  EXPECT_EQ(h.status().code(), absl::StatusCode::kUnimplemented) << h.status();
  EXPECT_TRUE(absl::StrContains(h.status().message(), "cuda backend")) << h.status();

  EXPECT_EQ(Usage().imported_buffers(), 0u);
  ExpectRoundTrip();
  auto [output, status] = producer->Finish();
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(output, absl::BytesToHexString(Pattern(0, 4096)) + "\n") << "nothing wrote it";
}

// docs/operations.md, "Shared tensors": CUDA calls freeing exported memory before the importer
// closed it undefined; a producer's death frees it. What the daemon promises: it serves on, its
// device is not lost, a read of the dead producer's memory returns its last bytes or an error
// (never another allocation's), and the release (or the session's end) closes the mapping.
TEST_F(CudaImportTest, AProducerKilledWhileTheDaemonMapsItsMemory) {
  std::unique_ptr<Exporter> producer = Exporter::Start(1 << 20);
  ASSERT_NE(producer, nullptr);
  ASSERT_EQ(producer->handle().size(), 64u) << "the exporter failed: " << producer->first_line();
  auto h = client_->ImportCudaIpc({producer->handle(), 0, 1 << 20, uuid_});
  ASSERT_TRUE(h.ok()) << h.status();
  auto read = client_->Read({*h}).get();
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ((*read)[0], Pattern(0, 1 << 20));

  producer->Kill();
  usleep(200000);  // Let the driver tear the producer's context down.
  read = client_->Read({*h}).get();
  if (read.ok()) {
    EXPECT_EQ((*read)[0], Pattern(0, 1 << 20)) << "the mapping kept the producer's bytes";
    std::printf("after the producer's death the import still reads its bytes\n");
  } else {
    EXPECT_NE(read.status().code(), absl::StatusCode::kUnavailable) << read.status();
    std::printf("after the producer's death the import's read fails: %s\n",
                read.status().ToString().c_str());
  }
  ::testing::Test::RecordProperty("read_after_producer_death",
                                  read.ok() ? "bytes" : read.status().ToString());
  // A second import of the dead producer's handle is refused: it names no live allocation.
  absl::StatusOr<Handle> again = client_->ImportCudaIpc({producer->handle(), 0, 16, uuid_});
  std::printf("importing the dead producer's handle again: %s\n",
              again.ok() ? "OK" : again.status().ToString().c_str());

  *h = Handle();
  if (again.ok()) *again = Handle();
  ASSERT_TRUE(client_->FlushReleases().ok());
  EXPECT_EQ(Usage().imported_buffers(), 0u);
  EXPECT_TRUE(Serving());
  ExpectRoundTrip();
  EXPECT_FALSE(absl::StrContains(daemon_->Log(), "device lost")) << daemon_->LogTail();
}

// The same, closed by the session's end instead of a release: the producer dies, then the
// client goes; another client finds nothing imported and the device serving.
TEST_F(CudaImportTest, ASessionEndingAfterItsProducerDiedClosesTheMapping) {
  std::unique_ptr<Exporter> producer = Exporter::Start(65536);
  ASSERT_NE(producer, nullptr);
  ASSERT_EQ(producer->handle().size(), 64u) << "the exporter failed: " << producer->first_line();
  auto h = client_->ImportCudaIpc({producer->handle(), 4096, 8192, uuid_});
  ASSERT_TRUE(h.ok()) << h.status();
  Tensor t{*h, {2048}, {1}, 4};
  Scalars one;
  one.floats = {1.0};
  ASSERT_TRUE(client_->Execute(Builtin("fill", ElemType::kF32), {}, {t}, {one}).ok());
  ASSERT_TRUE(client_->Sync().get().ok());  // Nothing queued on it when the producer dies.
  producer->Kill();
  h->Detach();  // Only the session's end releases it.
  client_.reset();

  ClientOptions c;
  c.address = daemon_->unix_address();
  auto client = Client::Connect(c);
  ASSERT_TRUE(client.ok()) << client.status();
  client_ = *std::move(client);
  for (int i = 0; i < 500 && Usage().imported_buffers() != 0; ++i) usleep(10000);
  EXPECT_EQ(Usage().imported_buffers(), 0u);
  EXPECT_TRUE(Serving());
  ExpectRoundTrip();
  EXPECT_FALSE(absl::StrContains(daemon_->Log(), "device lost")) << daemon_->LogTail();
}

}  // namespace
}  // namespace cubed
