// Bad input about messages and the session stream (rows of docs/error-model.md): a read over the
// message limit, a lease out of range, what one Create brings and one Read returns under a small
// --max_message_bytes (its own daemon, MessageLimitTest), and stream commands whose seq does not
// increase or that release a handle more times than it is held.

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tests/bad_input/bad_input_fixture.h"
#include "tests/testing/daemon_process.h"

namespace cubed::bad_input {
namespace {

using ::cubed::testing::DaemonProcess;

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
}  // namespace cubed::bad_input
