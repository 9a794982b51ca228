// Bad input about buffers and sessions (rows of docs/error-model.md): unknown handles and
// sessions, another session's handle, offsets past the end or overlapping, tensor data that does
// not match its shape, shapes and sizes that overflow or are zero, requests over the memory limit,
// reads with no bindings or sizes that overflow their sum, and releases of unknown handles or of a
// handle more times than it is held. Each leaves MemoryUsage as it was and the session usable.

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/bad_input/bad_input_fixture.h"

namespace cubed::bad_input {
namespace {

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

}  // namespace
}  // namespace cubed::bad_input
