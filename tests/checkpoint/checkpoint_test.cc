// Checkpoint and restore (Note [Checkpoint and restore], server/channel/device.h) with the real
// daemon: sessions written on SIGTERM and by `cubectl drain --checkpoint`, brought back by a new
// daemon with --restore on the same socket under the same ids and bytes, over unary calls and a
// resumed session stream; refused checkpoints (corrupt, truncated, missing, wrong version, too
// big); the files' modes; and a loop of kernels across a restart ending as without one.

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/crypto/sha256.h"
#include "common/kernel_metadata.h"
#include "cubed/v1/checkpoint.pb.h"
#include "cubed/v1/compute.grpc.pb.h"
#include "cubed/v1/session.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/testing/daemon_process.h"
#include "tests/testing/temp_dir.h"

namespace {

using ::cubed::testing::DaemonProcess;
using ::cubed::testing::TempDir;
namespace v1 = ::cubed::v1;
namespace fs = std::filesystem;

constexpr uint64_t kFirstClientId = uint64_t{1} << 63;
constexpr uint64_t kN = 64;  // f32 elements of every buffer.

std::chrono::system_clock::time_point In(absl::Duration d) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(d);
}

std::string FloatBytes(const std::vector<float>& v) {
  std::string s(v.size() * sizeof(float), '\0');
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteWholeFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

std::string Sha256(const std::string& data) {
  absl::StatusOr<std::string> digest = cubed::Sha256::Of(data);
  EXPECT_TRUE(digest.ok()) << digest.status();
  return digest.value_or("");
}

// The serialized manifest inside a manifest file.
std::string Manifest(const std::string& file_bytes) {
  v1::CheckpointFile file;
  EXPECT_TRUE(file.ParseFromString(file_bytes));
  return file.manifest();
}

mode_t Mode(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & 0777;
}

// The metadata and bindings of builtin "add" over three dense f32[kN] buffers.
void SetAdd(v1::Bindings* b, uint64_t lhs, uint64_t rhs, uint64_t out) {
  for (uint64_t h : {lhs, rhs, out}) b->add_buffers()->set_handle(h);
  const cubed::TensorLayout t = cubed::TensorLayout::Contiguous({kN});
  absl::StatusOr<std::vector<uint32_t>> words =
      cubed::EncodeKernelMetadata({kN, kN, kN}, {t, t, t});
  ASSERT_TRUE(words.ok()) << words.status();
  for (uint32_t w : *words) b->add_metadata(w);
}

void SetAddKernel(v1::Kernel* kernel, v1::CubeCount* count) {
  kernel->mutable_builtin()->set_name("add");
  kernel->mutable_builtin()->set_dtype(v1::ELEM_TYPE_F32);
  count->mutable_static_count()->set_x(1);
  count->mutable_static_count()->set_y(1);
  count->mutable_static_count()->set_z(1);
}

// Unary calls on one daemon address; every call has a deadline.
class Unary {
 public:
  // `token`: sent as a bearer token on every call (a TCP principal); empty: none.
  explicit Unary(const std::string& address, std::string token = "") : token_(std::move(token)) {
    channel_ = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
    stub_ = v1::Compute::NewStub(channel_);
    stream_stub_ = v1::SessionStream::NewStub(channel_);
  }
  v1::Compute::Stub& stub() { return *stub_; }
  v1::SessionStream::Stub& stream_stub() { return *stream_stub_; }

  uint64_t Open() {
    grpc::ClientContext ctx;
    Prepare(ctx);
    v1::OpenSessionRequest req;
    req.set_lease_ms(600000);
    v1::OpenSessionResponse resp;
    grpc::Status s = stub_->OpenSession(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.session();
  }
  uint64_t Create(uint64_t session, const std::string& data) {
    grpc::ClientContext ctx;
    Prepare(ctx);
    v1::CreateRequest req;
    req.set_session(session);
    req.set_data(data);
    v1::CreateResponse resp;
    grpc::Status s = stub_->Create(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.handle();
  }
  uint64_t Empty(uint64_t session, uint64_t size) {
    grpc::ClientContext ctx;
    Prepare(ctx);
    v1::EmptyRequest req;
    req.set_session(session);
    req.set_size(size);
    v1::EmptyResponse resp;
    grpc::Status s = stub_->Empty(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.handle();
  }
  grpc::Status Add(uint64_t session, uint64_t lhs, uint64_t rhs, uint64_t out) {
    grpc::ClientContext ctx;
    Prepare(ctx);
    v1::ExecuteRequest req;
    req.set_session(session);
    SetAddKernel(req.mutable_kernel(), req.mutable_count());
    SetAdd(req.mutable_bindings(), lhs, rhs, out);
    v1::ExecuteResponse resp;
    return stub_->Execute(&ctx, req, &resp);
  }
  // The bytes of `handle`; the status's message when the read fails.
  std::string Read(uint64_t session, uint64_t handle, grpc::Status* status = nullptr) {
    grpc::ClientContext ctx;
    Prepare(ctx);
    v1::ReadRequest req;
    req.set_session(session);
    req.add_bindings()->set_handle(handle);
    v1::ReadResponse resp;
    grpc::Status s = stub_->Read(&ctx, req, &resp);
    if (status != nullptr) *status = s;
    if (!s.ok() || resp.data_size() != 1) return "error: " + s.error_message();
    return resp.data(0);
  }
  v1::MemoryUsage Usage() {
    grpc::ClientContext ctx;
    Prepare(ctx);
    v1::MemoryUsageResponse resp;
    grpc::Status s = stub_->MemoryUsage(&ctx, v1::MemoryUsageRequest(), &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.usage();
  }

 private:
  void Prepare(grpc::ClientContext& ctx) const {
    ctx.set_deadline(In(absl::Seconds(10)));
    if (!token_.empty()) ctx.AddMetadata("authorization", "Bearer " + token_);
  }
  std::string token_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Compute::Stub> stub_;
  std::unique_ptr<v1::SessionStream::Stub> stream_stub_;
};

// A session stream: opened, or resuming `resume`.
class Stream {
 public:
  Stream(v1::SessionStream::Stub& stub, uint64_t resume = 0, const std::string& token = "") {
    ctx_.set_deadline(In(absl::Seconds(30)));
    if (!token.empty()) ctx_.AddMetadata("authorization", "Bearer " + token);
    rw_ = stub.Session(&ctx_);
    v1::SessionRequest open;
    open.mutable_open()->set_resume_session(resume);
    rw_->Write(open);
    v1::SessionResponse first;
    if (rw_->Read(&first) && first.has_opened()) {
      session_ = first.opened().session();
      resumed_seq_ = first.opened().resumed_seq();
    }
  }
  uint64_t session() const { return session_; }
  uint64_t resumed_seq() const { return resumed_seq_; }
  bool Send(const std::vector<v1::Command>& commands) {
    v1::SessionRequest req;
    for (const v1::Command& c : commands) *req.add_commands() = c;
    return rw_->Write(req);
  }
  // The next reply; code -1 when the stream ended.
  v1::Reply Next() {
    v1::SessionResponse resp;
    while (pending_.empty()) {
      if (!rw_->Read(&resp)) {
        v1::Reply none;
        none.set_code(-1);
        return none;
      }
      for (const v1::Reply& r : resp.replies()) pending_.push_back(r);
    }
    v1::Reply r = pending_.front();
    pending_.erase(pending_.begin());
    return r;
  }
  grpc::Status Finish() {
    rw_->WritesDone();
    v1::SessionResponse resp;
    while (rw_->Read(&resp)) {
    }
    return rw_->Finish();
  }

 private:
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionResponse>> rw_;
  std::vector<v1::Reply> pending_;
  uint64_t session_ = 0;
  uint64_t resumed_seq_ = 0;
};

v1::Command StreamCreate(uint64_t seq, uint64_t id, const std::string& data) {
  v1::Command c;
  c.set_seq(seq);
  c.mutable_create()->set_id(id);
  c.mutable_create()->set_data(data);
  return c;
}

v1::Command StreamEmpty(uint64_t seq, uint64_t id, uint64_t size) {
  v1::Command c;
  c.set_seq(seq);
  c.mutable_empty()->set_id(id);
  c.mutable_empty()->set_size(size);
  return c;
}

v1::Command StreamAdd(uint64_t seq, uint64_t lhs, uint64_t rhs, uint64_t out) {
  v1::Command c;
  c.set_seq(seq);
  v1::Command::Execute* e = c.mutable_execute();
  SetAddKernel(e->mutable_kernel(), e->mutable_count());
  SetAdd(e->mutable_bindings(), lhs, rhs, out);
  return c;
}

v1::Command StreamRead(uint64_t seq, uint64_t id) {
  v1::Command c;
  c.set_seq(seq);
  c.mutable_read()->add_bindings()->set_handle(id);
  return c;
}

v1::Command StreamSync(uint64_t seq) {
  v1::Command c;
  c.set_seq(seq);
  c.mutable_sync();
  return c;
}

// The socket path of a "unix:PATH" address.
std::string SocketPath(const std::string& address) { return address.substr(5); }

// Starts a CPU daemon with `flags`, on `socket` when given (a restart on the same socket).
std::unique_ptr<DaemonProcess> StartDaemon(std::vector<std::string> flags,
                                           const std::string& socket = "") {
  DaemonProcess::Options options;
  options.flags = std::move(flags);
  options.socket = socket;
  absl::StatusOr<std::unique_ptr<DaemonProcess>> d = DaemonProcess::Start(options);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *std::move(d) : nullptr;
}

struct CubectlResult {
  int exit_code = -1;
  std::string out;
};

// Runs cubectl with `args` and returns its exit code and stdout (stderr appended).
CubectlResult Cubectl(const std::vector<std::string>& args) {
  std::string command = CUBECTL_BINARY_PATH;
  for (const std::string& a : args) command += " '" + a + "'";
  command += " 2>&1";
  CubectlResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.out.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// Waits for a daemon that was told to stop by other means than a signal (a drain) to exit.
int WaitForExit(DaemonProcess& daemon) {
  absl::StatusOr<int> code = daemon.Stop(0, absl::Seconds(20));  // Signal 0 only probes.
  return code.ok() ? *code : -1;
}

// What the tests put in a daemon before it stops: a unary session with x, one and x + one, and
// a stream session with y and y + one; the stream stays open until the daemon goes.
struct Work {
  uint64_t session = 0;
  uint64_t x = 0, one = 0, sum = 0;
  std::string x_bytes, sum_bytes;
  uint64_t stream_session = 0;
  uint64_t y = kFirstClientId + 1, y_sum = kFirstClientId + 2;
  std::string y_sum_bytes;
  std::unique_ptr<Stream> stream;
  v1::MemoryUsage usage;
};

void DoWork(Unary& u, Work& w) {
  std::vector<float> x(kN), y(kN);
  for (uint64_t i = 0; i < kN; ++i) {
    x[i] = static_cast<float>(i) * 0.5f;
    y[i] = 100.0f - static_cast<float>(i);
  }
  w.session = u.Open();
  ASSERT_NE(w.session, 0u);
  w.x_bytes = FloatBytes(x);
  w.x = u.Create(w.session, w.x_bytes);
  w.one = u.Create(w.session, FloatBytes(std::vector<float>(kN, 1.0f)));
  w.sum = u.Empty(w.session, kN * sizeof(float));
  ASSERT_TRUE(u.Add(w.session, w.x, w.one, w.sum).ok());
  w.sum_bytes = u.Read(w.session, w.sum);
  std::vector<float> expect(kN);
  for (uint64_t i = 0; i < kN; ++i) expect[i] = x[i] + 1.0f;
  ASSERT_EQ(w.sum_bytes, FloatBytes(expect));

  w.stream = std::make_unique<Stream>(u.stream_stub());
  w.stream_session = w.stream->session();
  ASSERT_NE(w.stream_session, 0u);
  // The stream holds three handles of its own: y, one and y + one.
  const uint64_t one = kFirstClientId + 3;
  ASSERT_TRUE(
      w.stream->Send({StreamCreate(1, w.y, FloatBytes(y)),
                      StreamCreate(2, one, FloatBytes(std::vector<float>(kN, 1.0f))),
                      StreamEmpty(3, w.y_sum, kN * sizeof(float)), StreamAdd(4, w.y, one, w.y_sum),
                      StreamRead(5, w.y_sum), StreamSync(6)}));
  v1::Reply read = w.stream->Next();
  ASSERT_EQ(read.code(), 0) << read.message();
  ASSERT_EQ(read.read().data_size(), 1);
  w.y_sum_bytes = read.read().data(0);
  for (uint64_t i = 0; i < kN; ++i) expect[i] = y[i] + 1.0f;
  ASSERT_EQ(w.y_sum_bytes, FloatBytes(expect));
  v1::Reply sync = w.stream->Next();
  ASSERT_EQ(sync.code(), 0) << sync.message();
  w.usage = u.Usage();
}

// Checks a restored daemon at `address` against `w`: same ids, same bytes, same memory usage;
// the stream session resumes once.
void CheckRestored(const std::string& address, const Work& w) {
  Unary u(address);
  const v1::MemoryUsage usage = u.Usage();
  EXPECT_EQ(usage.bytes_in_use(), w.usage.bytes_in_use());
  EXPECT_EQ(usage.number_allocs(), w.usage.number_allocs());
  EXPECT_EQ(u.Read(w.session, w.x), w.x_bytes);
  EXPECT_EQ(u.Read(w.session, w.sum), w.sum_bytes);
  // Work goes on in the restored session: sum = sum + one.
  const uint64_t next = u.Empty(w.session, kN * sizeof(float));
  ASSERT_TRUE(u.Add(w.session, w.sum, w.one, next).ok());
  const std::string next_bytes = u.Read(w.session, next);
  std::vector<float> sum(kN);
  std::memcpy(sum.data(), w.sum_bytes.data(), w.sum_bytes.size());
  for (float& v : sum) v += 1.0f;
  EXPECT_EQ(next_bytes, FloatBytes(sum));
  // A unary read of a stream-session handle works too.
  EXPECT_EQ(u.Read(w.stream_session, w.y_sum), w.y_sum_bytes);

  Stream resumed(u.stream_stub(), w.stream_session);
  ASSERT_EQ(resumed.session(), w.stream_session);
  EXPECT_EQ(resumed.resumed_seq(), 6u);  // The sync, DoWork's last command.
  ASSERT_TRUE(resumed.Send({StreamRead(1, w.y_sum), StreamSync(2)}));
  v1::Reply read = resumed.Next();
  ASSERT_EQ(read.code(), 0) << read.message();
  ASSERT_EQ(read.read().data_size(), 1);
  EXPECT_EQ(read.read().data(0), w.y_sum_bytes);
  // Only one stream resumes a session.
  Stream again(u.stream_stub(), w.stream_session);
  EXPECT_EQ(again.session(), 0u);
  grpc::Status refused = again.Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << refused.error_message();
  // A session the checkpoint never had does not resume.
  Stream unknown(u.stream_stub(), w.stream_session ^ 0x100);
  EXPECT_EQ(unknown.Finish().error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(resumed.Finish().ok());
}

// A valid checkpoint of `Work`, written by SIGTERM into `dir`.
void MakeCheckpoint(const std::string& dir, Work* w = nullptr) {
  std::unique_ptr<DaemonProcess> a = StartDaemon({"--checkpoint_dir=" + dir});
  ASSERT_NE(a, nullptr);
  Work local;
  Work& work = w != nullptr ? *w : local;
  Unary u(a->unix_address());
  DoWork(u, work);
  absl::StatusOr<int> code = a->Stop(SIGTERM);
  ASSERT_TRUE(code.ok()) << code.status();
  ASSERT_EQ(*code, 0) << a->LogTail();
  ASSERT_TRUE(fs::exists(dir + "/manifest")) << a->LogTail();
}

TEST(CheckpointTest, SigtermWritesSessionsAndRestoreBringsThemBack) {
  TempDir tmp("cubed-ckpt");
  const std::string dir = tmp.path() + "/checkpoint";  // Made by the daemon.
  std::unique_ptr<DaemonProcess> a = StartDaemon({"--checkpoint_dir=" + dir});
  ASSERT_NE(a, nullptr);
  Work w;
  {
    Unary u(a->unix_address());
    DoWork(u, w);
  }
  ASSERT_FALSE(HasFatalFailure());
  absl::StatusOr<int> code = a->Stop(SIGTERM);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << a->LogTail();
  EXPECT_TRUE(absl::StrContains(a->Log(), "checkpoint: 2 sessions (6 handles")) << a->LogTail();
  // Readable only by the daemon's user.
  EXPECT_EQ(Mode(dir), 0700u);
  EXPECT_EQ(Mode(dir + "/manifest"), 0600u);
  EXPECT_EQ(Mode(dir + "/data"), 0600u);
  EXPECT_FALSE(fs::exists(dir + "/manifest.tmp"));
  EXPECT_FALSE(fs::exists(dir + "/data.tmp"));
  w.stream.reset();  // Its daemon is gone.

  std::unique_ptr<DaemonProcess> b =
      StartDaemon({"--restore=" + dir}, SocketPath(a->unix_address()));
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(absl::StrContains(b->Log(), "restored 2 sessions (6 handles")) << b->LogTail();
  CheckRestored(a->unix_address(), w);
  // Restored once: the manifest is set aside, so a later restart does not bring them back.
  EXPECT_FALSE(fs::exists(dir + "/manifest"));
  EXPECT_TRUE(fs::exists(dir + "/manifest.restored"));
}

TEST(CheckpointTest, CubectlDrainCheckpointWritesAndExits) {
  TempDir tmp("cubed-ckpt");
  const std::string dir = tmp.path() + "/checkpoint";
  std::unique_ptr<DaemonProcess> a = StartDaemon({"--checkpoint_dir=" + dir});
  ASSERT_NE(a, nullptr);
  Work w;
  {
    Unary u(a->unix_address());
    DoWork(u, w);
  }
  ASSERT_FALSE(HasFatalFailure());
  const CubectlResult drained =
      Cubectl({"--address=" + a->unix_address(), "--json", "drain", "--checkpoint"});
  EXPECT_EQ(drained.exit_code, 0) << drained.out;
  EXPECT_TRUE(absl::StrContains(drained.out, "\"sessions\": 2")) << drained.out;
  EXPECT_TRUE(absl::StrContains(drained.out, "\"handles\": 6")) << drained.out;
  EXPECT_EQ(WaitForExit(*a), 0) << a->LogTail();
  // The stream saw the daemon go.
  EXPECT_EQ(w.stream->Next().code(), -1);
  w.stream.reset();
  EXPECT_EQ(Mode(dir + "/manifest"), 0600u);

  std::unique_ptr<DaemonProcess> b =
      StartDaemon({"--restore=" + dir}, SocketPath(a->unix_address()));
  ASSERT_NE(b, nullptr);
  CheckRestored(a->unix_address(), w);
}

TEST(CheckpointTest, DrainCheckpointWithoutDirectoryIsRefusedAndServesOn) {
  std::unique_ptr<DaemonProcess> a = StartDaemon({});
  ASSERT_NE(a, nullptr);
  Unary u(a->unix_address());
  const uint64_t session = u.Open();
  const uint64_t h = u.Create(session, "abcd");
  const CubectlResult drained =
      Cubectl({"--address=" + a->unix_address(), "drain", "--checkpoint"});
  EXPECT_NE(drained.exit_code, 0) << drained.out;
  EXPECT_TRUE(absl::StrContains(drained.out, "--checkpoint_dir")) << drained.out;
  EXPECT_EQ(u.Read(session, h), "abcd");
}

TEST(CheckpointTest, CheckpointOverTheLimitIsRefusedWritingNothing) {
  TempDir tmp("cubed-ckpt");
  const std::string dir = tmp.path() + "/checkpoint";
  std::unique_ptr<DaemonProcess> a =
      StartDaemon({"--checkpoint_dir=" + dir, "--checkpoint_max_bytes=4KiB"});
  ASSERT_NE(a, nullptr);
  Unary u(a->unix_address());
  const uint64_t session = u.Open();
  const std::string big(8192, 'z');
  const uint64_t h = u.Create(session, big);
  const CubectlResult drained =
      Cubectl({"--address=" + a->unix_address(), "drain", "--checkpoint"});
  EXPECT_NE(drained.exit_code, 0) << drained.out;
  EXPECT_TRUE(absl::StrContains(drained.out, "RESOURCE_EXHAUSTED")) << drained.out;
  EXPECT_TRUE(absl::StrContains(drained.out, "--checkpoint_max_bytes")) << drained.out;
  EXPECT_FALSE(fs::exists(dir + "/manifest"));
  EXPECT_FALSE(fs::exists(dir + "/data"));
  EXPECT_FALSE(fs::exists(dir + "/data.tmp"));
  // The daemon serves on, sessions as they were.
  EXPECT_EQ(u.Read(session, h), big);
  EXPECT_NE(u.Open(), 0u);
  // SIGTERM refuses the same way and still exits cleanly.
  absl::StatusOr<int> code = a->Stop(SIGTERM);
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 0);
  EXPECT_FALSE(fs::exists(dir + "/manifest"));
}

// Restoring `dir` must fail, naming `file` and `what`.
void ExpectRefused(const std::string& dir, const std::string& file, const std::string& what) {
  TempDir run("cubed-ckpt");
  absl::StatusOr<cubed::testing::ExitedProcess> p = cubed::testing::RunCubedToExit(
      {"--listen=" + run.path() + "/cubed.sock", "--backend=cpu", "--restore=" + dir}, run.path());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->exit_code, 1) << p->err;
  EXPECT_TRUE(absl::StrContains(p->err, dir + "/" + file)) << p->err;
  EXPECT_TRUE(absl::StrContains(p->err, what)) << p->err;
  EXPECT_FALSE(absl::StrContains(p->err, "serving on")) << p->err;
}

TEST(CheckpointTest, FaultyCheckpointsAreRefusedAsAWhole) {
  TempDir tmp("cubed-ckpt");
  const std::string good = tmp.path() + "/good";
  MakeCheckpoint(good);
  ASSERT_FALSE(HasFatalFailure());
  const std::string manifest = ReadWholeFile(good + "/manifest");
  const std::string data = ReadWholeFile(good + "/data");
  ASSERT_FALSE(manifest.empty());
  ASSERT_FALSE(data.empty());
  auto variant = [&](const std::string& name, const std::string& m, const std::string& d) {
    const std::string dir = tmp.path() + "/" + name;
    fs::create_directory(dir);
    if (!m.empty()) WriteWholeFile(dir + "/manifest", m);
    if (!d.empty()) WriteWholeFile(dir + "/data", d);
    return dir;
  };
  std::string flipped = data;
  flipped[flipped.size() / 2] ^= 0x01;
  ExpectRefused(variant("flipped-data", manifest, flipped), "data", "do not match their SHA-256");
  ExpectRefused(variant("truncated-data", manifest, data.substr(0, data.size() - 1)), "data",
                "truncated");
  ExpectRefused(variant("missing-data", manifest, ""), "data", "missing");
  ExpectRefused(variant("missing-manifest", "", data), "manifest", "missing");
  std::string bad_manifest = manifest;
  bad_manifest[bad_manifest.size() - 40] ^= 0x01;  // Inside the manifest or its digest.
  ExpectRefused(variant("flipped-manifest", bad_manifest, data), "manifest", "SHA-256");
  ExpectRefused(variant("truncated-manifest", manifest.substr(0, manifest.size() / 2), data),
                "manifest", "does not parse");
  v1::CheckpointFile file;
  ASSERT_TRUE(file.ParseFromString(manifest));
  file.set_version(3);
  ExpectRefused(variant("wrong-version", file.SerializeAsString(), data), "manifest",
                "format version 3");
  // A consistent manifest with an impossible number: a lease past the daemon's maximum.
  v1::CheckpointManifest m;
  ASSERT_TRUE(m.ParseFromString(file.manifest()));
  m.mutable_sessions(0)->set_lease_ms(~uint64_t{0});
  file.set_version(2);
  file.set_manifest(m.SerializeAsString());
  file.set_manifest_sha256(Sha256(file.manifest()));
  ExpectRefused(variant("bad-lease", file.SerializeAsString(), data), "manifest", "lease_ms");
  // ... and a handle whose bytes overlap the previous one's.
  ASSERT_TRUE(m.ParseFromString(Manifest(manifest)));
  ASSERT_GE(m.sessions(0).handles_size(), 2);
  m.mutable_sessions(0)->mutable_handles(1)->set_data_offset(0);
  file.set_manifest(m.SerializeAsString());
  file.set_manifest_sha256(Sha256(file.manifest()));
  ExpectRefused(variant("overlap", file.SerializeAsString(), data), "manifest",
                "are not the next ones");
}

// A version 1 checkpoint (a daemon before graphs were kept) restores as before: an upgrade
// from it keeps every session.
TEST(CheckpointTest, VersionOneCheckpointsStillRestore) {
  TempDir tmp("cubed-ckpt");
  const std::string dir = tmp.path() + "/checkpoint";
  Work w;
  MakeCheckpoint(dir, &w);
  ASSERT_FALSE(HasFatalFailure());
  w.stream.reset();
  v1::CheckpointFile file;
  ASSERT_TRUE(file.ParseFromString(ReadWholeFile(dir + "/manifest")));
  ASSERT_EQ(file.version(), 2u);
  file.set_version(1);  // The manifest has no graph fields: exactly what version 1 wrote.
  WriteWholeFile(dir + "/manifest", file.SerializeAsString());
  std::unique_ptr<DaemonProcess> b = StartDaemon({"--restore=" + dir});
  ASSERT_NE(b, nullptr);
  CheckRestored(b->unix_address(), w);
}

TEST(CheckpointTest, FullDiskIsRefusedLeavingNothingAndServesOn) {
  TempDir tmp("cubed-ckpt");
  const std::string dir = tmp.path() + "/checkpoint";
  DaemonProcess::Options options;
  options.flags = {"--checkpoint_dir=" + dir};
  options.file_size_limit = 256 << 10;  // The data file (1 MiB) hits it: EFBIG, a full disk.
  absl::StatusOr<std::unique_ptr<DaemonProcess>> a = DaemonProcess::Start(options);
  ASSERT_TRUE(a.ok()) << a.status();
  Unary u((*a)->unix_address());
  const uint64_t session = u.Open();
  const std::string big(1 << 20, 'q');
  const uint64_t h = u.Create(session, big);
  const CubectlResult drained =
      Cubectl({"--address=" + (*a)->unix_address(), "drain", "--checkpoint"});
  EXPECT_NE(drained.exit_code, 0) << drained.out;
  EXPECT_TRUE(absl::StrContains(drained.out, "RESOURCE_EXHAUSTED")) << drained.out;
  EXPECT_TRUE(absl::StrContains(drained.out, "disk full")) << drained.out;
  EXPECT_FALSE(fs::exists(dir + "/data.tmp"));
  EXPECT_FALSE(fs::exists(dir + "/manifest.tmp"));
  EXPECT_FALSE(fs::exists(dir + "/manifest"));
  EXPECT_EQ(u.Read(session, h), big);
  // SIGKILL: under RLIMIT_FSIZE, after a write failed EFBIG, the daemon's exit after "shut down
  // cleanly" takes ~10 s (seen, not yet explained; docs/reliability.md), too slow for CI.
  ASSERT_TRUE((*a)->Stop(SIGKILL).ok());
}

TEST(CheckpointTest, KernelLoopAcrossRestartEndsAsWithoutOne) {
  TempDir tmp("cubed-ckpt");
  const std::string dir = tmp.path() + "/checkpoint";
  constexpr int kSteps = 20;
  // x = x * 1 + one, kSteps times, in one session; the same on a daemon that is checkpointed,
  // stopped and restored halfway.
  auto run = [&](bool restart) -> std::string {
    std::unique_ptr<DaemonProcess> a = StartDaemon({"--checkpoint_dir=" + dir});
    if (a == nullptr) return "no daemon";
    const std::string address = a->unix_address();
    std::unique_ptr<DaemonProcess> b;
    auto u = std::make_unique<Unary>(address);
    const uint64_t session = u->Open();
    std::vector<float> x0(kN);
    for (uint64_t i = 0; i < kN; ++i) x0[i] = static_cast<float>(i) / 3.0f;
    uint64_t x = u->Create(session, FloatBytes(x0));
    const uint64_t one = u->Create(session, FloatBytes(std::vector<float>(kN, 0.25f)));
    for (int step = 0; step < kSteps; ++step) {
      if (restart && step == kSteps / 2) {
        absl::StatusOr<int> code = a->Stop(SIGTERM);
        if (!code.ok() || *code != 0) return "stop failed: " + a->LogTail();
        b = StartDaemon({"--restore=" + dir}, SocketPath(address));
        if (b == nullptr) return "restart failed";
        u = std::make_unique<Unary>(address);
      }
      const uint64_t next = u->Empty(session, kN * sizeof(float));
      grpc::Status s = u->Add(session, x, one, next);
      if (!s.ok()) return "step failed: " + s.error_message();
      x = next;
    }
    return u->Read(session, x);
  };
  const std::string without = run(false);
  const std::string with = run(true);
  ASSERT_EQ(without.size(), kN * sizeof(float)) << without;
  EXPECT_EQ(with, without);
}

TEST(CheckpointTest, RestoredSessionsKeepTheirOwners) {
  TempDir tmp("cubed-ckpt");
  const std::string dir = tmp.path() + "/checkpoint";
  constexpr char kBobToken[] = "bob-token-0123456789abcdef";
  WriteWholeFile(tmp.path() + "/tokens", absl::StrCat("bob ", kBobToken, "\n"));
  chmod((tmp.path() + "/tokens").c_str(), 0600);
  auto config = [&](bool with_bob) {
    const std::string path = tmp.path() + (with_bob ? "/auth.textproto" : "/alice.textproto");
    WriteWholeFile(path,
                   absl::StrCat("token_file: \"tokens\"\n", "principal { name: \"alice\" uids: ",
                                getuid(), " permissions { all_rpcs: true } }\n",
                                with_bob ? "principal { name: \"bob\" permissions { all_rpcs: "
                                           "true } }\n"
                                         : ""));
    return path;
  };
  const std::string auth = config(true);
  DaemonProcess::Options options;
  options.tcp = true;
  options.flags = {"--auth_config=" + auth, "--checkpoint_dir=" + dir};
  absl::StatusOr<std::unique_ptr<DaemonProcess>> a = DaemonProcess::Start(options);
  ASSERT_TRUE(a.ok()) << a.status();
  const std::string unix_address = (*a)->unix_address();
  uint64_t alice_session = 0, alice_handle = 0, bob_session = 0, bob_handle = 0;
  {
    Unary alice(unix_address);
    alice_session = alice.Open();
    alice_handle = alice.Create(alice_session, "alice's");
    Unary bob((*a)->tcp_address(), kBobToken);
    bob_session = bob.Open();
    bob_handle = bob.Create(bob_session, "bob's");
  }
  ASSERT_EQ(*(*a)->Stop(SIGTERM), 0) << (*a)->LogTail();

  // A daemon whose policy no longer has bob refuses the checkpoint as a whole.
  {
    TempDir run("cubed-ckpt");
    absl::StatusOr<cubed::testing::ExitedProcess> p =
        cubed::testing::RunCubedToExit({"--listen=" + run.path() + "/cubed.sock", "--backend=cpu",
                                        "--restore=" + dir, "--auth_config=" + config(false)},
                                       run.path());
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->exit_code, 1) << p->err;
    EXPECT_TRUE(absl::StrContains(p->err, "principal 'bob'")) << p->err;
  }

  options.flags = {"--auth_config=" + auth, "--restore=" + dir,
                   "--listen=" + SocketPath(unix_address)};
  absl::StatusOr<std::unique_ptr<DaemonProcess>> b = DaemonProcess::Start(options);
  ASSERT_TRUE(b.ok()) << b.status();
  Unary alice(unix_address);
  Unary bob((*b)->tcp_address(), kBobToken);
  EXPECT_EQ(alice.Read(alice_session, alice_handle), "alice's");
  EXPECT_EQ(bob.Read(bob_session, bob_handle), "bob's");
  // Each session is still its owner's only: bob cannot read or resume alice's, nor she his.
  grpc::Status s;
  bob.Read(alice_session, alice_handle, &s);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  Stream stolen(bob.stream_stub(), alice_session, kBobToken);
  EXPECT_EQ(stolen.session(), 0u);
  EXPECT_EQ(stolen.Finish().error_code(), grpc::StatusCode::NOT_FOUND);
  Stream stolen_back(alice.stream_stub(), bob_session);
  EXPECT_EQ(stolen_back.Finish().error_code(), grpc::StatusCode::NOT_FOUND);
  // ... and the owner still may.
  Stream resumed(alice.stream_stub(), alice_session);
  EXPECT_EQ(resumed.session(), alice_session);
  EXPECT_TRUE(resumed.Finish().ok());
}

TEST(CheckpointTest, RestoreOfAnEmptyDirectoryStartsEmpty) {
  TempDir tmp("cubed-ckpt");
  std::unique_ptr<DaemonProcess> a = StartDaemon({"--restore=" + tmp.path()});
  ASSERT_NE(a, nullptr);
  Unary u(a->unix_address());
  EXPECT_EQ(u.Usage().number_allocs(), 0u);
}

}  // namespace
