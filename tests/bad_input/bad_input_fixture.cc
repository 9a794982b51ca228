#include "tests/bad_input/bad_input_fixture.h"

#include <chrono>
#include <iostream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/kernel_metadata.h"

namespace cubed::bad_input {

using ::cubed::testing::DaemonProcess;

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

grpc::Status StatusOf(const v1::Reply& reply) {
  return grpc::Status(static_cast<grpc::StatusCode>(reply.code()), reply.message());
}
Stream::Stream(v1::SessionStream::Stub& stub)
    : context_(Context()), rw_(stub.Session(context_.get())) {
  v1::SessionRequest open;
  open.mutable_open();
  v1::SessionResponse opened;
  opened_ = rw_->Write(open) && rw_->Read(&opened) && opened.has_opened();
}

Stream::~Stream() {
  rw_->WritesDone();
  v1::SessionResponse rest;
  while (rw_->Read(&rest)) {
  }
  (void)rw_->Finish();
}

bool Stream::Send(std::vector<v1::Command> commands) {
  v1::SessionRequest request;
  for (v1::Command& c : commands) *request.add_commands() = std::move(c);
  return rw_->Write(request);
}

v1::Reply Stream::Next() {
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

v1::Command Stream::Create(uint64_t seq, uint64_t id, const std::string& data) {
  v1::Command c;
  c.set_seq(seq);
  c.mutable_create()->set_id(id);
  c.mutable_create()->set_data(data);
  return c;
}

v1::Command Stream::Read(uint64_t seq, uint64_t id) {
  v1::Command c;
  c.set_seq(seq);
  c.mutable_read()->add_bindings()->set_handle(id);
  return c;
}

v1::Command Stream::Release(uint64_t seq, std::vector<uint64_t> ids) {
  v1::Command c;
  c.set_seq(seq);
  for (uint64_t id : ids) c.mutable_release()->add_ids(id);
  return c;
}

v1::Command Stream::Sync(uint64_t seq) {
  v1::Command c;
  c.set_seq(seq);
  c.mutable_sync();
  return c;
}

DaemonProcess* BadInputTest::daemon_ = nullptr;
v1::Compute::Stub* BadInputTest::stub_ = nullptr;
v1::SessionStream::Stub* BadInputTest::stream_stub_ = nullptr;

void BadInputTest::SetUpTestSuite() {
  DaemonProcess::Options options;
  options.flags = {"--memory_limit=64MiB"};
  auto d = DaemonProcess::Start(options);
  ASSERT_TRUE(d.ok()) << d.status();
  daemon_ = d->release();
  auto channel = grpc::CreateChannel(daemon_->unix_address(), grpc::InsecureChannelCredentials());
  stub_ = v1::Compute::NewStub(channel).release();
  stream_stub_ = v1::SessionStream::NewStub(channel).release();
}

void BadInputTest::TearDownTestSuite() {
  delete stream_stub_;
  stream_stub_ = nullptr;
  delete stub_;
  stub_ = nullptr;
  delete daemon_;
  daemon_ = nullptr;
}

void BadInputTest::SetUp() {
  ASSERT_NE(stub_, nullptr);
  session_ = OpenSession();
  ASSERT_NE(session_, 0u);
}

void BadInputTest::TearDown() {
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

uint64_t BadInputTest::OpenSession() {
  v1::OpenSessionRequest req;
  v1::OpenSessionResponse resp;
  grpc::Status s = stub_->OpenSession(Context().get(), req, &resp);
  EXPECT_TRUE(s.ok()) << Describe(s);
  return resp.session();
}

void BadInputTest::CloseSession(uint64_t session) {
  v1::CloseSessionRequest req;
  req.set_session(session);
  v1::CloseSessionResponse resp;
  grpc::Status s = stub_->CloseSession(Context().get(), req, &resp);
  EXPECT_TRUE(s.ok()) << Describe(s);
}

uint64_t BadInputTest::Create(uint64_t session, const std::string& bytes) {
  v1::CreateRequest req;
  req.set_session(session);
  req.set_data(bytes);
  v1::CreateResponse resp;
  grpc::Status s = stub_->Create(Context().get(), req, &resp);
  EXPECT_TRUE(s.ok()) << Describe(s);
  return resp.handle();
}

uint64_t BadInputTest::Empty(uint64_t session, uint64_t size) {
  v1::EmptyRequest req;
  req.set_session(session);
  req.set_size(size);
  v1::EmptyResponse resp;
  grpc::Status s = stub_->Empty(Context().get(), req, &resp);
  EXPECT_TRUE(s.ok()) << Describe(s);
  return resp.handle();
}

void BadInputTest::Release(uint64_t session, const std::vector<uint64_t>& handles) {
  v1::ReleaseRequest req;
  req.set_session(session);
  for (uint64_t h : handles) req.add_handles(h);
  v1::ReleaseResponse resp;
  grpc::Status s = stub_->Release(Context().get(), req, &resp);
  EXPECT_TRUE(s.ok()) << Describe(s);
}

std::string BadInputTest::ReadAll(uint64_t handle) {
  v1::ReadRequest req;
  req.set_session(session_);
  req.add_bindings()->set_handle(handle);
  v1::ReadResponse resp;
  grpc::Status s = stub_->Read(Context().get(), req, &resp);
  EXPECT_TRUE(s.ok()) << Describe(s);
  return resp.data_size() == 1 ? resp.data(0) : "";
}

v1::MemoryUsage BadInputTest::Usage() {
  v1::MemoryUsageRequest req;
  v1::MemoryUsageResponse resp;
  grpc::Status s = stub_->MemoryUsage(Context().get(), req, &resp);
  EXPECT_TRUE(s.ok()) << Describe(s);
  return resp.usage();
}

void BadInputTest::SnapshotUsage() { before_ = Usage(); }

void BadInputTest::ExpectUsageUnchanged() {
  const v1::MemoryUsage after = Usage();
  EXPECT_EQ(after.number_allocs(), before_.number_allocs());
  EXPECT_EQ(after.bytes_in_use(), before_.bytes_in_use());
  EXPECT_EQ(after.bytes_padding(), before_.bytes_padding());
  EXPECT_EQ(after.bytes_reserved(), before_.bytes_reserved());
}

v1::ExecuteRequest BadInputTest::ValidAdd() {
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

grpc::Status BadInputTest::Execute(const v1::ExecuteRequest& req) {
  v1::ExecuteResponse resp;
  return stub_->Execute(Context().get(), req, &resp);
}

void BadInputTest::ExpectValidAddRuns() {
  grpc::Status s = Execute(ValidAdd());
  ASSERT_TRUE(s.ok()) << "the valid add failed: " << Describe(s);
  EXPECT_EQ(ReadAll(add_buffers_[2]), Floats({11, 22, 33, 44}));
}

std::string BadInputTest::Floats(std::vector<float> v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

}  // namespace cubed::bad_input
