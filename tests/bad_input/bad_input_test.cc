// Bad input against the real daemon: one TEST per row of docs/error-model.md. Each sends one
// malformed, unknown, over-limit or not-now request through the generated stub and checks what a
// client sees: the status code, a message naming the problem, MemoryUsage (all four numbers)
// unchanged by the failed request, and the session still usable afterwards.

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/kernel_metadata.h"
#include "cubed/v1/compute.grpc.pb.h"
#include "cubed/v1/session.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/testing/daemon_process.h"

namespace {

using ::cubed::testing::DaemonProcess;
namespace v1 = ::cubed::v1;

constexpr uint64_t kMiB = uint64_t{1} << 20;

std::string CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::OK:
      return "OK";
    case grpc::CANCELLED:
      return "CANCELLED";
    case grpc::UNKNOWN:
      return "UNKNOWN";
    case grpc::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::ABORTED:
      return "ABORTED";
    case grpc::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::INTERNAL:
      return "INTERNAL";
    case grpc::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return absl::StrCat("code ", static_cast<int>(code));
  }
}

std::string Describe(const grpc::Status& s) {
  return absl::StrCat(CodeName(s.error_code()), ": ", s.error_message());
}

// The status has `code` and its message contains every word of `words` (case-insensitive).
::testing::AssertionResult Fails(const grpc::Status& s, grpc::StatusCode code,
                                 std::vector<std::string> words) {
  if (s.ok()) return ::testing::AssertionFailure() << "succeeded, expected " << CodeName(code);
  if (s.error_code() != code) {
    return ::testing::AssertionFailure()
           << "got " << Describe(s) << ", expected " << CodeName(code);
  }
  const std::string message = absl::AsciiStrToLower(s.error_message());
  for (const std::string& w : words) {
    if (message.find(absl::AsciiStrToLower(w)) == std::string::npos) {
      return ::testing::AssertionFailure()
             << "message \"" << s.error_message() << "\" does not mention \"" << w << "\"";
    }
  }
  std::cout << "    got " << Describe(s) << "\n";  // the wording docs/error-model.md quotes
  return ::testing::AssertionSuccess();
}

std::unique_ptr<grpc::ClientContext> Context() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  return ctx;
}

constexpr uint64_t kFirstClientId = uint64_t{1} << 63;

// A reply's code and message as a status, for Fails().
grpc::Status StatusOf(const v1::Reply& reply) {
  return grpc::Status(static_cast<grpc::StatusCode>(reply.code()), reply.message());
}

// One session stream (cubed.v1.SessionStream/Session), for the rows about stream commands.
class Stream {
 public:
  explicit Stream(v1::SessionStream::Stub& stub)
      : context_(Context()), rw_(stub.Session(context_.get())) {
    v1::SessionRequest open;
    open.mutable_open();
    v1::SessionResponse opened;
    opened_ = rw_->Write(open) && rw_->Read(&opened) && opened.has_opened();
  }
  ~Stream() {
    rw_->WritesDone();
    v1::SessionResponse rest;
    while (rw_->Read(&rest)) {
    }
    (void)rw_->Finish();
  }
  bool opened() const { return opened_; }

  bool Send(std::vector<v1::Command> commands) {
    v1::SessionRequest request;
    for (v1::Command& c : commands) *request.add_commands() = std::move(c);
    return rw_->Write(request);
  }
  // The next reply; code -1 when the stream ended instead.
  v1::Reply Next() {
    while (replies_.empty()) {
      v1::SessionResponse response;
      if (!rw_->Read(&response)) {
        v1::Reply none;
        none.set_code(-1);
        return none;
      }
      for (v1::Reply& r : *response.mutable_replies()) replies_.push_back(std::move(r));
    }
    v1::Reply r = std::move(replies_.front());
    replies_.pop_front();
    return r;
  }

  static v1::Command Create(uint64_t seq, uint64_t id, const std::string& data) {
    v1::Command c;
    c.set_seq(seq);
    c.mutable_create()->set_id(id);
    c.mutable_create()->set_data(data);
    return c;
  }
  static v1::Command Read(uint64_t seq, uint64_t id) {
    v1::Command c;
    c.set_seq(seq);
    c.mutable_read()->add_bindings()->set_handle(id);
    return c;
  }
  static v1::Command Release(uint64_t seq, std::vector<uint64_t> ids) {
    v1::Command c;
    c.set_seq(seq);
    for (uint64_t id : ids) c.mutable_release()->add_ids(id);
    return c;
  }
  static v1::Command Sync(uint64_t seq) {
    v1::Command c;
    c.set_seq(seq);
    c.mutable_sync();
    return c;
  }

 private:
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionResponse>> rw_;
  std::deque<v1::Reply> replies_;
  bool opened_ = false;
};

class BadInputTest : public ::testing::Test {
 protected:
  // One daemon per test program; ctest runs every TEST as its own program.
  static void SetUpTestSuite() {
    DaemonProcess::Options options;
    options.flags = {"--memory_limit=64MiB"};
    auto d = DaemonProcess::Start(options);
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = d->release();
    auto channel = grpc::CreateChannel(daemon_->unix_address(), grpc::InsecureChannelCredentials());
    stub_ = v1::Compute::NewStub(channel).release();
    stream_stub_ = v1::SessionStream::NewStub(channel).release();
  }
  static void TearDownTestSuite() {
    delete stream_stub_;
    stream_stub_ = nullptr;
    delete stub_;
    stub_ = nullptr;
    delete daemon_;
    daemon_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(stub_, nullptr);
    session_ = OpenSession();
    ASSERT_NE(session_, 0u);
  }

  // Checks the session still works: create, read back, release, close.
  void TearDown() override {
    if (session_ == 0 || HasFatalFailure()) return;
    const std::string bytes = "still works";
    const uint64_t h = Create(session_, bytes);
    ASSERT_NE(h, 0u);
    v1::ReadRequest read;
    read.set_session(session_);
    read.add_bindings()->set_handle(h);
    v1::ReadResponse got;
    grpc::Status s = stub_->Read(Context().get(), read, &got);
    ASSERT_TRUE(s.ok()) << "the session no longer works after the bad request: " << Describe(s);
    ASSERT_EQ(got.data_size(), 1);
    EXPECT_EQ(got.data(0), bytes);
    Release(session_, {h});
    CloseSession(session_);
  }

  uint64_t OpenSession() {
    v1::OpenSessionRequest req;
    v1::OpenSessionResponse resp;
    grpc::Status s = stub_->OpenSession(Context().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << Describe(s);
    return resp.session();
  }
  void CloseSession(uint64_t session) {
    v1::CloseSessionRequest req;
    req.set_session(session);
    v1::CloseSessionResponse resp;
    grpc::Status s = stub_->CloseSession(Context().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << Describe(s);
  }
  uint64_t Create(uint64_t session, const std::string& bytes) {
    v1::CreateRequest req;
    req.set_session(session);
    req.set_data(bytes);
    v1::CreateResponse resp;
    grpc::Status s = stub_->Create(Context().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << Describe(s);
    return resp.handle();
  }
  uint64_t Empty(uint64_t session, uint64_t size) {
    v1::EmptyRequest req;
    req.set_session(session);
    req.set_size(size);
    v1::EmptyResponse resp;
    grpc::Status s = stub_->Empty(Context().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << Describe(s);
    return resp.handle();
  }
  void Release(uint64_t session, const std::vector<uint64_t>& handles) {
    v1::ReleaseRequest req;
    req.set_session(session);
    for (uint64_t h : handles) req.add_handles(h);
    v1::ReleaseResponse resp;
    grpc::Status s = stub_->Release(Context().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << Describe(s);
  }
  std::string ReadAll(uint64_t handle) {
    v1::ReadRequest req;
    req.set_session(session_);
    req.add_bindings()->set_handle(handle);
    v1::ReadResponse resp;
    grpc::Status s = stub_->Read(Context().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << Describe(s);
    return resp.data_size() == 1 ? resp.data(0) : "";
  }
  v1::MemoryUsage Usage() {
    v1::MemoryUsageRequest req;
    v1::MemoryUsageResponse resp;
    grpc::Status s = stub_->MemoryUsage(Context().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << Describe(s);
    return resp.usage();
  }

  // Remembers MemoryUsage now; ExpectUsageUnchanged compares all four numbers with it.
  void SnapshotUsage() { before_ = Usage(); }
  void ExpectUsageUnchanged() {
    const v1::MemoryUsage after = Usage();
    EXPECT_EQ(after.number_allocs(), before_.number_allocs());
    EXPECT_EQ(after.bytes_in_use(), before_.bytes_in_use());
    EXPECT_EQ(after.bytes_padding(), before_.bytes_padding());
    EXPECT_EQ(after.bytes_reserved(), before_.bytes_reserved());
  }

  // A valid `add` of two f32 vectors of 4 into a third, in this session. The kernel tests
  // below first check that it runs, then break exactly one thing.
  v1::ExecuteRequest ValidAdd() {
    if (add_buffers_.empty()) {
      const std::string a = Floats({1, 2, 3, 4}), b = Floats({10, 20, 30, 40});
      add_buffers_ = {Create(session_, a), Create(session_, b), Empty(session_, 16)};
    }
    v1::ExecuteRequest req;
    req.set_session(session_);
    v1::BuiltinKernel* k = req.mutable_kernel()->mutable_builtin();
    k->set_name("add");
    k->set_dtype(v1::ELEM_TYPE_F32);
    v1::CubeCount::Static* count = req.mutable_count()->mutable_static_count();
    count->set_x(1);
    count->set_y(1);
    count->set_z(1);
    for (uint64_t h : add_buffers_) req.mutable_bindings()->add_buffers()->set_handle(h);
    const cubed::TensorLayout layout = cubed::TensorLayout::Contiguous({4});
    auto metadata = cubed::EncodeKernelMetadata({4, 4, 4}, {layout, layout, layout});
    EXPECT_TRUE(metadata.ok()) << metadata.status();
    for (uint32_t w : *metadata) req.mutable_bindings()->add_metadata(w);
    return req;
  }
  grpc::Status Execute(const v1::ExecuteRequest& req) {
    v1::ExecuteResponse resp;
    return stub_->Execute(Context().get(), req, &resp);
  }
  // Runs the valid add and checks its output: the launch path works before the broken one.
  void ExpectValidAddRuns() {
    grpc::Status s = Execute(ValidAdd());
    ASSERT_TRUE(s.ok()) << "the valid add failed: " << Describe(s);
    EXPECT_EQ(ReadAll(add_buffers_[2]), Floats({11, 22, 33, 44}));
  }
  static std::string Floats(std::vector<float> v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  }

  static DaemonProcess* daemon_;
  static v1::Compute::Stub* stub_;
  static v1::SessionStream::Stub* stream_stub_;
  uint64_t session_ = 0;
  v1::MemoryUsage before_;
  std::vector<uint64_t> add_buffers_;
};

DaemonProcess* BadInputTest::daemon_ = nullptr;
v1::Compute::Stub* BadInputTest::stub_ = nullptr;
v1::SessionStream::Stub* BadInputTest::stream_stub_ = nullptr;

TEST_F(BadInputTest, UnknownHandle) {
  SnapshotUsage();
  v1::ReadRequest req;
  req.set_session(session_);
  req.add_bindings()->set_handle(987654321);
  v1::ReadResponse resp;
  EXPECT_TRUE(Fails(stub_->Read(Context().get(), req, &resp), grpc::NOT_FOUND, {"handle"}));
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, AnotherSessionsHandle) {
  const uint64_t other = OpenSession();
  const uint64_t theirs = Create(other, "not yours");
  SnapshotUsage();
  v1::ReadRequest req;
  req.set_session(session_);
  req.add_bindings()->set_handle(theirs);
  v1::ReadResponse resp;
  EXPECT_TRUE(Fails(stub_->Read(Context().get(), req, &resp), grpc::NOT_FOUND, {"handle"}));
  // Nor can this session release it.
  v1::ReleaseRequest rel;
  rel.set_session(session_);
  rel.add_handles(theirs);
  v1::ReleaseResponse rel_resp;
  EXPECT_TRUE(Fails(stub_->Release(Context().get(), rel, &rel_resp), grpc::NOT_FOUND, {"handle"}));
  ExpectUsageUnchanged();
  CloseSession(other);
}

TEST_F(BadInputTest, UnknownSession) {
  SnapshotUsage();
  v1::CreateRequest req;
  req.set_session(session_ ^ 0x5a5a5a5a5a5a5a5aULL);
  req.set_data("orphan");
  v1::CreateResponse resp;
  EXPECT_TRUE(Fails(stub_->Create(Context().get(), req, &resp), grpc::NOT_FOUND, {"session"}));
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, OffsetPastTheEnd) {
  const uint64_t h = Create(session_, std::string(16, 'x'));
  SnapshotUsage();
  v1::ReadRequest req;
  req.set_session(session_);
  v1::Binding* b = req.add_bindings();
  b->set_handle(h);
  b->set_offset_start(17);
  v1::ReadResponse resp;
  EXPECT_TRUE(Fails(stub_->Read(Context().get(), req, &resp), grpc::INVALID_ARGUMENT, {"offset"}));
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, OffsetsOverlap) {
  const uint64_t h = Create(session_, std::string(16, 'x'));
  SnapshotUsage();
  v1::ReadRequest req;
  req.set_session(session_);
  v1::Binding* b = req.add_bindings();
  b->set_handle(h);
  b->set_offset_start(10);  // 10 > 16 - 10
  b->set_offset_end(10);
  v1::ReadResponse resp;
  EXPECT_TRUE(Fails(stub_->Read(Context().get(), req, &resp), grpc::INVALID_ARGUMENT, {"offset"}));
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, CreateTensorDataLengthMismatch) {
  SnapshotUsage();
  v1::CreateTensorRequest req;
  req.set_session(session_);
  req.add_shape(2);
  req.add_shape(3);
  req.set_elem_size(4);
  req.set_data(std::string(20, '\0'));  // needs 2 * 3 * 4 = 24
  v1::CreateTensorResponse resp;
  EXPECT_TRUE(Fails(stub_->CreateTensor(Context().get(), req, &resp), grpc::INVALID_ARGUMENT,
                    {"data", "24"}));
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, ShapeProductOverflows) {
  SnapshotUsage();
  v1::EmptyTensorRequest req;
  req.set_session(session_);
  req.add_shape(uint64_t{1} << 32);
  req.add_shape(uint64_t{1} << 32);
  req.add_shape(16);
  req.set_elem_size(4);
  v1::EmptyTensorResponse resp;
  EXPECT_TRUE(
      Fails(stub_->EmptyTensor(Context().get(), req, &resp), grpc::INVALID_ARGUMENT, {"shape"}));
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, ZeroSizeEmpty) {
  SnapshotUsage();
  v1::EmptyRequest req;
  req.set_session(session_);
  req.set_size(0);
  v1::EmptyResponse resp;
  EXPECT_TRUE(Fails(stub_->Empty(Context().get(), req, &resp), grpc::INVALID_ARGUMENT, {"size"}));
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, HugeEmpty) {
  SnapshotUsage();
  v1::EmptyRequest req;
  req.set_session(session_);
  req.set_size(uint64_t{1} << 60);
  v1::EmptyResponse resp;
  EXPECT_TRUE(Fails(stub_->Empty(Context().get(), req, &resp), grpc::RESOURCE_EXHAUSTED,
                    {"1152921504606846976"}));
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, OverMemoryLimit) {
  SnapshotUsage();
  v1::EmptyRequest req;
  req.set_session(session_);
  req.set_size(100 * kMiB);
  v1::EmptyResponse resp;
  EXPECT_TRUE(
      Fails(stub_->Empty(Context().get(), req, &resp), grpc::RESOURCE_EXHAUSTED, {"limit"}));
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, OverMemoryLimitInTotal) {
  // Each request fits in one allocation; together they pass the 64 MiB limit.
  const uint64_t first = Empty(session_, 40 * kMiB);
  ASSERT_NE(first, 0u);
  SnapshotUsage();
  v1::EmptyRequest req;
  req.set_session(session_);
  req.set_size(40 * kMiB);
  v1::EmptyResponse resp;
  EXPECT_TRUE(
      Fails(stub_->Empty(Context().get(), req, &resp), grpc::RESOURCE_EXHAUSTED, {"limit"}));
  ExpectUsageUnchanged();
  Release(session_, {first});
}

TEST_F(BadInputTest, UnknownKernel) {
  ExpectValidAddRuns();
  v1::ExecuteRequest req = ValidAdd();
  req.mutable_kernel()->mutable_builtin()->set_name("no_such_kernel");
  SnapshotUsage();
  EXPECT_TRUE(Fails(Execute(req), grpc::NOT_FOUND, {"no_such_kernel"}));
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, WrongBindingCountForAdd) {
  ExpectValidAddRuns();
  v1::ExecuteRequest req = ValidAdd();
  req.mutable_bindings()->mutable_buffers()->RemoveLast();
  const cubed::TensorLayout layout = cubed::TensorLayout::Contiguous({4});
  auto metadata = cubed::EncodeKernelMetadata({4, 4}, {layout, layout});
  ASSERT_TRUE(metadata.ok());
  req.mutable_bindings()->clear_metadata();
  for (uint32_t w : *metadata) req.mutable_bindings()->add_metadata(w);
  SnapshotUsage();
  EXPECT_TRUE(Fails(Execute(req), grpc::INVALID_ARGUMENT, {"add", "3"}));
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, UnsupportedDtype) {
  ExpectValidAddRuns();
  v1::ExecuteRequest req = ValidAdd();
  req.mutable_bindings()->mutable_buffers()->RemoveLast();  // exp: one input, one output
  const cubed::TensorLayout layout = cubed::TensorLayout::Contiguous({4});
  auto metadata = cubed::EncodeKernelMetadata({4, 4}, {layout, layout});
  ASSERT_TRUE(metadata.ok());
  req.mutable_bindings()->clear_metadata();
  for (uint32_t w : *metadata) req.mutable_bindings()->add_metadata(w);
  req.mutable_kernel()->mutable_builtin()->set_name("exp");
  req.mutable_kernel()->mutable_builtin()->set_dtype(v1::ELEM_TYPE_I32);
  SnapshotUsage();
  EXPECT_TRUE(Fails(Execute(req), grpc::INVALID_ARGUMENT, {"exp", "i32"}));
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, ElemTypeUnspecified) {
  ExpectValidAddRuns();
  v1::ExecuteRequest req = ValidAdd();
  req.mutable_kernel()->mutable_builtin()->set_dtype(v1::ELEM_TYPE_UNSPECIFIED);
  SnapshotUsage();
  EXPECT_TRUE(Fails(Execute(req), grpc::INVALID_ARGUMENT, {"dtype"}));
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, BroadcastReductionOverItsData) {
  // docs/security.md, "Fuzzing": `sum` over [100000000] elements that stride 0 makes of one f32.
  ExpectValidAddRuns();
  v1::ExecuteRequest req = ValidAdd();
  req.mutable_bindings()->mutable_buffers()->RemoveLast();  // sum: in (a 16-byte handle), out
  req.mutable_kernel()->mutable_builtin()->set_name("sum");
  cubed::TensorLayout in = cubed::TensorLayout::Contiguous({100000000});
  in.strides[0] = 0;
  auto metadata = cubed::EncodeKernelMetadata({4, 4}, {in, cubed::TensorLayout::Contiguous({1})});
  ASSERT_TRUE(metadata.ok());
  req.mutable_bindings()->clear_metadata();
  for (uint32_t w : *metadata) req.mutable_bindings()->add_metadata(w);
  SnapshotUsage();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(Fails(Execute(req), grpc::INVALID_ARGUMENT,
                    {"sum", "buffer 0 (in)", "strides [0]", "claims 100000000", "holds 4"}));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));  // Not run.
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, ZeroCubeCount) {
  ExpectValidAddRuns();
  v1::ExecuteRequest req = ValidAdd();
  req.mutable_count()->mutable_static_count()->set_x(0);
  SnapshotUsage();
  EXPECT_TRUE(Fails(Execute(req), grpc::INVALID_ARGUMENT, {"count"}));
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, OversizedCubeCount) {
  ExpectValidAddRuns();
  v1::ExecuteRequest req = ValidAdd();
  req.mutable_count()->mutable_static_count()->set_x(uint32_t{1} << 31);
  SnapshotUsage();
  EXPECT_TRUE(Fails(Execute(req), grpc::INVALID_ARGUMENT, {"count", "2147483648"}));
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, DynamicCubeCountBindingTooSmall) {
  ExpectValidAddRuns();
  const uint64_t small = Create(session_, std::string(8, '\1'));  // 8 < 12 bytes
  v1::ExecuteRequest req = ValidAdd();
  req.mutable_count()->mutable_dynamic()->set_handle(small);
  SnapshotUsage();
  EXPECT_TRUE(Fails(Execute(req), grpc::INVALID_ARGUMENT, {"12"}));
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, UncheckedModeNotAllowed) {
  ExpectValidAddRuns();
  v1::ExecuteRequest req = ValidAdd();
  req.set_mode(v1::EXECUTION_MODE_UNCHECKED);
  SnapshotUsage();
  EXPECT_TRUE(Fails(Execute(req), grpc::PERMISSION_DENIED, {"unchecked"}));
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, EndProfileWithoutStart) {
  SnapshotUsage();
  v1::EndProfileRequest req;
  req.set_session(session_);
  v1::EndProfileResponse resp;
  EXPECT_TRUE(Fails(stub_->EndProfile(Context().get(), req, &resp), grpc::FAILED_PRECONDITION,
                    {"profile"}));
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, CudaSourceOnCpu) {
  if (cubed::testing::TestBackend() != "cpu")
    GTEST_SKIP() << "a row of the cpu backend: cuda runs client kernels";
  ExpectValidAddRuns();
  v1::ExecuteRequest req = ValidAdd();
  v1::CudaSourceKernel* k = req.mutable_kernel()->mutable_cuda_source();
  k->set_source("extern \"C\" __global__ void k(float* x) { x[threadIdx.x] = 1.0f; }");
  k->set_entry_point("k");
  k->mutable_cube_dim()->set_x(4);
  k->mutable_cube_dim()->set_y(1);
  k->mutable_cube_dim()->set_z(1);
  SnapshotUsage();
  EXPECT_TRUE(Fails(Execute(req), grpc::UNIMPLEMENTED, {"cuda"}));
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, PtxOnCpu) {
  if (cubed::testing::TestBackend() != "cpu")
    GTEST_SKIP() << "a row of the cpu backend: cuda runs client kernels";
  ExpectValidAddRuns();
  v1::ExecuteRequest req = ValidAdd();
  v1::PtxKernel* k = req.mutable_kernel()->mutable_ptx();
  k->set_ptx(".version 7.0\n.target sm_50\n.address_size 64\n.visible .entry k() { ret; }\n");
  k->set_entry_point("k");
  k->mutable_cube_dim()->set_x(1);
  k->mutable_cube_dim()->set_y(1);
  k->mutable_cube_dim()->set_z(1);
  SnapshotUsage();
  EXPECT_TRUE(Fails(Execute(req), grpc::UNIMPLEMENTED, {"ptx"}));
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, ReadWithZeroBindings) {
  SnapshotUsage();
  v1::ReadRequest req;
  req.set_session(session_);
  v1::ReadResponse resp;
  EXPECT_TRUE(Fails(stub_->Read(Context().get(), req, &resp), grpc::INVALID_ARGUMENT, {"binding"}));
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, ReleaseUnknownHandleReleasesNothing) {
  const uint64_t h = Create(session_, "kept");
  SnapshotUsage();
  v1::ReleaseRequest req;
  req.set_session(session_);
  req.add_handles(h);  // valid, listed first: must survive the failed call
  req.add_handles(987654321);
  v1::ReleaseResponse resp;
  EXPECT_TRUE(
      Fails(stub_->Release(Context().get(), req, &resp), grpc::NOT_FOUND, {"handle", "987654321"}));
  ExpectUsageUnchanged();
  EXPECT_EQ(ReadAll(h), "kept");
}

// Four bindings that each pass their own checks (stride 0: each addresses the 4 bytes it has),
// but whose dense sizes (2^62 bytes each) overflow 64 bits in total. Before the fix the sum
// wrapped to 0 and the daemon died resizing the reply (issue 10 §1).
TEST_F(BadInputTest, ReadTensorSizesOverflowTheirSum) {
  const uint64_t h = Create(session_, "AAAA");
  SnapshotUsage();
  v1::ReadTensorRequest req;
  req.set_session(session_);
  for (int i = 0; i < 4; ++i) {
    v1::BindingWithMeta* b = req.add_bindings();
    b->mutable_binding()->set_handle(h);
    b->add_shape(uint64_t{1} << 60);
    b->add_strides(0);
    b->set_elem_size(4);
  }
  v1::ReadTensorResponse resp;
  EXPECT_TRUE(Fails(stub_->ReadTensor(Context().get(), req, &resp), grpc::INVALID_ARGUMENT,
                    {"bindings[", "overflows"}));
  ExpectUsageUnchanged();
  EXPECT_EQ(ReadAll(h), "AAAA");
}

// A read over the message limit is a limit: RESOURCE_EXHAUSTED, like an oversized Create.
TEST_F(BadInputTest, ReadOverTheMessageLimit) {
  const uint64_t h = Create(session_, "AAAA");
  SnapshotUsage();
  v1::ReadTensorRequest req;
  req.set_session(session_);
  v1::BindingWithMeta* b = req.add_bindings();
  b->mutable_binding()->set_handle(h);
  b->add_shape(uint64_t{1} << 28);  // 1 GiB of one repeated f32: over the default 512 MiB.
  b->add_strides(0);
  b->set_elem_size(4);
  v1::ReadTensorResponse resp;
  EXPECT_TRUE(Fails(stub_->ReadTensor(Context().get(), req, &resp), grpc::RESOURCE_EXHAUSTED,
                    {"1073741824", "max_message_bytes"}));
  ExpectUsageUnchanged();
}

// The message names the lease that was sent, not a clamped one.
TEST_F(BadInputTest, LeaseOutOfRange) {
  SnapshotUsage();
  v1::OpenSessionRequest req;
  req.set_lease_ms(~uint64_t{0});
  v1::OpenSessionResponse resp;
  EXPECT_TRUE(Fails(stub_->OpenSession(Context().get(), req, &resp), grpc::INVALID_ARGUMENT,
                    {"lease_ms", "18446744073709551615"}));
  ExpectUsageUnchanged();
}

// A daemon with a small --max_message_bytes: what one Create can bring, one Read returns
// (before, reads were held to the limit minus 4096 bytes).
class MessageLimitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DaemonProcess::Options options;
    options.flags = {"--memory_limit=64MiB", "--max_message_bytes=1MiB"};
    auto d = DaemonProcess::Start(options);
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = *std::move(d);
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    stub_ = v1::Compute::NewStub(grpc::CreateCustomChannel(
        daemon_->unix_address(), grpc::InsecureChannelCredentials(), args));
    v1::OpenSessionResponse opened;
    ASSERT_TRUE(stub_->OpenSession(Context().get(), v1::OpenSessionRequest(), &opened).ok());
    session_ = opened.session();
  }
  grpc::Status ReadAll(uint64_t handle, uint64_t* bytes) {
    v1::ReadRequest req;
    req.set_session(session_);
    req.add_bindings()->set_handle(handle);
    v1::ReadResponse resp;
    grpc::Status s = stub_->Read(Context().get(), req, &resp);
    *bytes = resp.data_size() == 1 ? resp.data(0).size() : 0;
    return s;
  }
  std::unique_ptr<DaemonProcess> daemon_;
  std::unique_ptr<v1::Compute::Stub> stub_;
  uint64_t session_ = 0;
};

TEST_F(MessageLimitTest, WhatOneCreateBringsOneReadReturns) {
  constexpr uint64_t kLimit = kMiB;
  // The largest Create that fits the message limit with its framing.
  uint64_t created = 0;
  uint64_t handle = 0;
  for (uint64_t size = kLimit - 8; size > kLimit - 64 && handle == 0; --size) {
    v1::CreateRequest req;
    req.set_session(session_);
    req.set_data(std::string(size, 'c'));
    v1::CreateResponse resp;
    grpc::Status s = stub_->Create(Context().get(), req, &resp);
    if (s.ok()) {
      handle = resp.handle();
      created = size;
    } else {
      EXPECT_EQ(s.error_code(), grpc::RESOURCE_EXHAUSTED) << Describe(s);
    }
  }
  ASSERT_NE(handle, 0u);
  uint64_t got = 0;
  grpc::Status s = ReadAll(handle, &got);
  EXPECT_TRUE(s.ok()) << Describe(s);
  EXPECT_EQ(got, created);
  // A buffer of exactly the limit reads back whole; one byte more does not, as a limit.
  v1::EmptyRequest empty;
  empty.set_session(session_);
  empty.set_size(kLimit + 1);
  v1::EmptyResponse e;
  ASSERT_TRUE(stub_->Empty(Context().get(), empty, &e).ok());
  v1::ReadRequest whole;
  whole.set_session(session_);
  v1::Binding* b = whole.add_bindings();
  b->set_handle(e.handle());
  b->set_offset_end(1);
  v1::ReadResponse resp;
  s = stub_->Read(Context().get(), whole, &resp);
  EXPECT_TRUE(s.ok()) << Describe(s);
  ASSERT_EQ(resp.data_size(), 1);
  EXPECT_EQ(resp.data(0).size(), kLimit);
  EXPECT_TRUE(
      Fails(ReadAll(e.handle(), &got), grpc::RESOURCE_EXHAUSTED, {"1048577", "max_message_bytes"}));
}

TEST_F(BadInputTest, ReleaseMoreTimesThanHeld) {
  const uint64_t h = Create(session_, "held once");
  SnapshotUsage();
  v1::ReleaseRequest req;
  req.set_session(session_);
  req.add_handles(h);
  req.add_handles(h);
  v1::ReleaseResponse resp;
  EXPECT_TRUE(Fails(stub_->Release(Context().get(), req, &resp), grpc::INVALID_ARGUMENT,
                    {"handles[1]", absl::StrCat(h), "released more times than it is held (1)"}));
  ExpectUsageUnchanged();
  EXPECT_EQ(ReadAll(h), "held once");
  // Released once it is gone: once more is an unknown handle.
  Release(session_, {h});
  req.clear_handles();
  req.add_handles(h);
  SnapshotUsage();
  EXPECT_TRUE(Fails(stub_->Release(Context().get(), req, &resp), grpc::NOT_FOUND,
                    {"handles[0]", absl::StrCat(h), "is not a handle of this session"}));
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, StreamSeqNotIncreasing) {
  Stream stream(*stream_stub_);
  ASSERT_TRUE(stream.opened());
  const uint64_t a = kFirstClientId + 1, b = kFirstClientId + 2;
  Create(session_, "a page is reserved");  // So that usage before and after compare exactly.
  SnapshotUsage();
  ASSERT_TRUE(stream.Send({Stream::Create(1, a, "a"), Stream::Create(1, b, "b"), Stream::Read(2, b),
                           Stream::Read(2, a), Stream::Sync(3)}));
  // The repeated create did not run: its id is poisoned with the seq error.
  v1::Reply r = stream.Next();
  EXPECT_EQ(r.seq(), 2u);
  EXPECT_TRUE(Fails(StatusOf(r), grpc::INVALID_ARGUMENT,
                    {"command 1 (create) failed: seq: 1 is not greater than the previous seq 1"}));
  // A repeated read answers with it.
  r = stream.Next();
  EXPECT_EQ(r.seq(), 2u);
  EXPECT_TRUE(Fails(StatusOf(r), grpc::INVALID_ARGUMENT,
                    {"seq: 2 is not greater than the previous seq 2; seq must strictly increase"}));
  // The sync counts the create (a command that answers reports its own failure).
  r = stream.Next();
  EXPECT_EQ(r.seq(), 3u);
  EXPECT_TRUE(Fails(StatusOf(r), grpc::INVALID_ARGUMENT, {"command 1 (create) failed: seq"}));
  EXPECT_EQ(r.failed_commands(), 1u);
  // The stream goes on; the first create ran.
  ASSERT_TRUE(stream.Send({Stream::Read(4, a)}));
  r = stream.Next();
  ASSERT_EQ(r.code(), 0) << r.message();
  EXPECT_EQ(r.read().data(0), "a");
  ASSERT_TRUE(stream.Send({Stream::Release(5, {a, b}), Stream::Sync(6)}));
  EXPECT_EQ(stream.Next().code(), 0);
  ExpectUsageUnchanged();
}

TEST_F(BadInputTest, StreamReleaseMoreTimesThanHeld) {
  Stream stream(*stream_stub_);
  ASSERT_TRUE(stream.opened());
  const uint64_t a = kFirstClientId + 1;
  Create(session_, "a page is reserved");  // So that usage before and after compare exactly.
  SnapshotUsage();
  ASSERT_TRUE(stream.Send({Stream::Create(1, a, "a"), Stream::Release(2, {a, a}), Stream::Sync(3),
                           Stream::Read(4, a)}));
  // One by one: the first drop releases it, the second finds no such handle.
  v1::Reply r = stream.Next();
  EXPECT_EQ(r.seq(), 3u);
  EXPECT_TRUE(Fails(
      StatusOf(r), grpc::NOT_FOUND,
      {"command 2 (release) failed: ids[1]", absl::StrCat(a), "is not a handle of this session"}));
  EXPECT_EQ(r.failed_commands(), 1u);
  r = stream.Next();
  EXPECT_EQ(r.seq(), 4u);
  EXPECT_TRUE(Fails(StatusOf(r), grpc::NOT_FOUND, {absl::StrCat(a), "is not a handle"}));
  ExpectUsageUnchanged();
}

}  // namespace
