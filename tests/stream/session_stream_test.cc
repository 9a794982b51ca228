// The session stream (proto/cubed/v1/session.proto) against the real daemon, through the raw
// generated stub: what a client of the fast path sees. Ordering under pipelining, poisoning and
// its error text, client-chosen ids, backpressure, and that the stream's end frees everything.

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/kernel_metadata.h"
#include "cubed/v1/compute.grpc.pb.h"
#include "cubed/v1/session.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/testing/daemon_process.h"

namespace {

using ::cubed::testing::DaemonProcess;
namespace v1 = ::cubed::v1;

constexpr uint64_t kFirstClientId = uint64_t{1} << 63;

std::chrono::system_clock::time_point In(absl::Duration d) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(d);
}

std::string FloatBytes(const std::vector<float>& v) {
  std::string s(v.size() * sizeof(float), '\0');
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}

std::vector<float> Floats(const std::string& s) {
  std::vector<float> v(s.size() / sizeof(float));
  std::memcpy(v.data(), s.data(), v.size() * sizeof(float));
  return v;
}

// Resident memory of a process, bytes (VmRSS in /proc/PID/status); 0 when unreadable.
uint64_t RssBytes(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, "VmRSS:")) continue;
    rest = absl::StripAsciiWhitespace(rest);
    absl::ConsumeSuffix(&rest, " kB");
    uint64_t kb = 0;
    if (absl::SimpleAtoi(rest, &kb)) return kb * 1024;
  }
  return 0;
}

// Commands, built the way a client would.
v1::Command Create(uint64_t seq, uint64_t id, std::string data) {
  v1::Command c;
  c.set_seq(seq);
  c.mutable_create()->set_id(id);
  c.mutable_create()->set_data(std::move(data));
  return c;
}

v1::Command Empty(uint64_t seq, uint64_t id, uint64_t size) {
  v1::Command c;
  c.set_seq(seq);
  c.mutable_empty()->set_id(id);
  c.mutable_empty()->set_size(size);
  return c;
}

v1::Command Read(uint64_t seq, uint64_t id) {
  v1::Command c;
  c.set_seq(seq);
  c.mutable_read()->add_bindings()->set_handle(id);
  return c;
}

v1::Command Sync(uint64_t seq) {
  v1::Command c;
  c.set_seq(seq);
  c.mutable_sync();
  return c;
}

v1::Command Release(uint64_t seq, uint64_t id) {
  v1::Command c;
  c.set_seq(seq);
  c.mutable_release()->add_ids(id);
  return c;
}

// out = lhs + rhs over `n` f32 elements, all dense 1-D (builtin "add").
v1::Command Add(uint64_t seq, uint64_t lhs, uint64_t rhs, uint64_t out, uint64_t n) {
  v1::Command c;
  c.set_seq(seq);
  v1::Command::Execute* e = c.mutable_execute();
  e->mutable_kernel()->mutable_builtin()->set_name("add");
  e->mutable_kernel()->mutable_builtin()->set_dtype(v1::ELEM_TYPE_F32);
  e->mutable_count()->mutable_static_count()->set_x(static_cast<uint32_t>((n + 255) / 256));
  e->mutable_count()->mutable_static_count()->set_y(1);
  e->mutable_count()->mutable_static_count()->set_z(1);
  for (uint64_t h : {lhs, rhs, out}) e->mutable_bindings()->add_buffers()->set_handle(h);
  const cubed::TensorLayout t = cubed::TensorLayout::Contiguous({n});
  const std::vector<cubed::TensorLayout> layouts = {t, t, t};
  const std::vector<uint64_t> lens = {n, n, n};
  absl::StatusOr<std::vector<uint32_t>> words = cubed::EncodeKernelMetadata(lens, layouts);
  EXPECT_TRUE(words.ok()) << words.status();
  if (words.ok()) {
    for (uint32_t w : *words) e->mutable_bindings()->add_metadata(w);
  }
  return c;
}

// One open session stream over the raw stub.
class Stream {
 public:
  Stream(v1::SessionStream::Stub& stub, uint32_t device = 0, uint64_t lease_ms = 0) {
    rw_ = stub.Session(&ctx_);
    v1::SessionRequest open;
    open.mutable_open()->set_device(device);
    open.mutable_open()->set_lease_ms(lease_ms);
    rw_->Write(open);
    v1::SessionResponse first;
    if (rw_->Read(&first) && first.has_opened()) {
      session_ = first.opened().session();
      EXPECT_EQ(first.opened().first_client_id(), kFirstClientId);
      for (v1::Reply& r : *first.mutable_replies()) replies_.push_back(std::move(r));
    }
  }

  bool opened() const { return session_ != 0; }
  uint64_t session() const { return session_; }
  uint64_t NextSeq() { return ++seq_; }
  uint64_t NewId() { return kFirstClientId + ++ids_; }
  grpc::ClientContext& context() { return ctx_; }
  grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionResponse>& rw() { return *rw_; }

  bool Send(std::vector<v1::Command> commands) {
    v1::SessionRequest req;
    for (v1::Command& c : commands) *req.add_commands() = std::move(c);
    return rw_->Write(req);
  }

  // The next reply; a reply with code -1 when the stream ended instead.
  v1::Reply Next() {
    while (replies_.empty()) {
      v1::SessionResponse resp;
      if (!rw_->Read(&resp)) {
        v1::Reply none;
        none.set_code(-1);
        return none;
      }
      for (v1::Reply& r : *resp.mutable_replies()) replies_.push_back(std::move(r));
    }
    v1::Reply r = std::move(replies_.front());
    replies_.pop_front();
    return r;
  }

  // Half-closes, reads what is left and returns the stream's status.
  grpc::Status Close() {
    rw_->WritesDone();
    v1::SessionResponse resp;
    while (rw_->Read(&resp)) {
    }
    return rw_->Finish();
  }

 private:
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionResponse>> rw_;
  std::deque<v1::Reply> replies_;
  uint64_t session_ = 0;
  uint64_t seq_ = 0;
  uint64_t ids_ = 0;
};

// An add chain x[i] = x[i - 1] + one of `links` links of `n` floats as commands of `s`: creates
// of `one` (ones) and x[0] (zeros), then per link an empty, the add and the release of the link
// before, a read of every 100th link, and a sync at the end.
struct AddChain {
  std::vector<v1::Command> commands;
  std::vector<uint64_t> read_seqs;  // Read k sees 100 * (k + 1) in every element.
  uint64_t sync_seq = 0;
};

AddChain MakeAddChain(Stream& s, int links, uint64_t n) {
  AddChain chain;
  const uint64_t one = s.NewId();
  uint64_t x = s.NewId();
  chain.commands.push_back(Create(s.NextSeq(), one, FloatBytes(std::vector<float>(n, 1.0f))));
  chain.commands.push_back(Create(s.NextSeq(), x, FloatBytes(std::vector<float>(n, 0.0f))));
  for (int i = 1; i <= links; ++i) {
    const uint64_t next = s.NewId();
    chain.commands.push_back(Empty(s.NextSeq(), next, n * sizeof(float)));
    chain.commands.push_back(Add(s.NextSeq(), x, one, next, n));
    chain.commands.push_back(Release(s.NextSeq(), x));
    x = next;
    if (i % 100 == 0) {
      chain.read_seqs.push_back(s.NextSeq());
      chain.commands.push_back(Read(chain.read_seqs.back(), x));
    }
  }
  chain.sync_seq = s.NextSeq();
  chain.commands.push_back(Sync(chain.sync_seq));
  return chain;
}

// The chain's answers, in order: each read's value, then the sync with no failed command.
void ExpectAddChainAnswers(Stream& s, const AddChain& chain, uint64_t n) {
  for (size_t k = 0; k < chain.read_seqs.size(); ++k) {
    v1::Reply r = s.Next();
    ASSERT_EQ(r.seq(), chain.read_seqs[k]);
    ASSERT_EQ(r.code(), 0) << r.message();
    ASSERT_EQ(r.read().data_size(), 1);
    const std::vector<float> got = Floats(r.read().data(0));
    ASSERT_EQ(got.size(), n);
    for (float v : got) ASSERT_EQ(v, 100.0f * static_cast<float>(k + 1));
  }
  v1::Reply sync = s.Next();
  EXPECT_EQ(sync.seq(), chain.sync_seq);
  EXPECT_EQ(sync.code(), 0) << sync.message();
  EXPECT_EQ(sync.failed_commands(), 0u);
}

class SessionStreamTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    DaemonProcess::Options options;
    options.flags = {"--memory_limit=512MiB"};
    absl::StatusOr<std::unique_ptr<DaemonProcess>> d = DaemonProcess::Start(options);
    if (!d.ok()) {
      start_error_ = d.status().ToString();
      return;
    }
    daemon_ = *std::move(d);
  }
  static void TearDownTestSuite() { daemon_.reset(); }

  void SetUp() override {
    ASSERT_NE(daemon_, nullptr) << start_error_;
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    channel_ = grpc::CreateCustomChannel(daemon_->unix_address(),
                                         grpc::InsecureChannelCredentials(), args);
    stream_stub_ = v1::SessionStream::NewStub(channel_);
    compute_ = v1::Compute::NewStub(channel_);
  }

  v1::MemoryUsage Usage() {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(absl::Seconds(5)));
    v1::MemoryUsageRequest req;
    v1::MemoryUsageResponse resp;
    grpc::Status s = compute_->MemoryUsage(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.usage();
  }

  // Waits up to 5 s for the bytes in use to return to `bytes`.
  bool UsageReturnsTo(uint64_t bytes, uint64_t allocs) {
    const absl::Time give_up = absl::Now() + absl::Seconds(5);
    while (absl::Now() < give_up) {
      v1::MemoryUsage u = Usage();
      if (u.bytes_in_use() == bytes && u.number_allocs() == allocs) return true;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  }

  // A unary call naming `session`: OK while it is open, NOT_FOUND after.
  grpc::Status UnaryCreate(uint64_t session, uint64_t* handle = nullptr) {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(absl::Seconds(5)));
    v1::CreateRequest req;
    req.set_session(session);
    req.set_data("abcd");
    v1::CreateResponse resp;
    grpc::Status s = compute_->Create(&ctx, req, &resp);
    if (handle != nullptr) *handle = resp.handle();
    return s;
  }

  static std::unique_ptr<DaemonProcess> daemon_;
  static std::string start_error_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::SessionStream::Stub> stream_stub_;
  std::unique_ptr<v1::Compute::Stub> compute_;
};

std::unique_ptr<DaemonProcess> SessionStreamTest::daemon_;
std::string SessionStreamTest::start_error_;

// Note [Raw session stream]: the daemon parses each request itself. Bytes that are no
// SessionRequest end the stream INVALID_ARGUMENT, naming the request's size, and the daemon
// serves the next stream as before.
TEST_F(SessionStreamTest, ARequestThatDoesNotParseEndsTheStreamNamingIt) {
  grpc::GenericStub generic(channel_);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(In(absl::Seconds(10)));
  auto next = [&](intptr_t want) {
    void* tag = nullptr;
    bool ok = false;
    EXPECT_TRUE(cq.Next(&tag, &ok));
    EXPECT_EQ(reinterpret_cast<intptr_t>(tag), want);
    return ok;
  };
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
      generic.PrepareCall(&ctx, "/cubed.v1.SessionStream/Session", &cq);
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(next(1));
  // Field 2 (commands) as a length-delimited entry claiming 100 bytes, with 3 behind it.
  const char garbage[] = {0x12, 0x64, 0x01, 0x02, 0x03};
  grpc::Slice slice(garbage, sizeof(garbage));
  grpc::ByteBuffer request(&slice, 1);
  call->Write(request, reinterpret_cast<void*>(2));
  next(2);  // May fail once the daemon ended the stream.
  grpc::ByteBuffer response;
  call->Read(&response, reinterpret_cast<void*>(3));
  EXPECT_FALSE(next(3)) << "the stream answered bytes that do not parse";
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(4));
  ASSERT_TRUE(next(4));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_TRUE(absl::StrContains(status.error_message(), "a request of 5 bytes does not parse"))
      << status.error_message();
  cq.Shutdown();
  void* tag;
  bool ok;
  while (cq.Next(&tag, &ok)) {
  }
  // The daemon serves the next stream.
  grpc::ClientContext again;
  again.set_deadline(In(absl::Seconds(10)));
  auto stream = stream_stub_->Session(&again);
  v1::SessionRequest open;
  open.mutable_open();
  ASSERT_TRUE(stream->Write(open));
  v1::SessionResponse opened;
  ASSERT_TRUE(stream->Read(&opened));
  EXPECT_TRUE(opened.has_opened());
  stream->WritesDone();
  while (stream->Read(&opened)) {
  }
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(SessionStreamTest, PipelinedCommandsRunInOrder) {
  Stream s(*stream_stub_);
  ASSERT_TRUE(s.opened());
  // 1000 links, sent without waiting in requests of 200 commands.
  constexpr uint64_t kN = 64;
  AddChain chain = MakeAddChain(s, 1000, kN);
  for (size_t i = 0; i < chain.commands.size(); i += 200) {
    const size_t end = std::min(chain.commands.size(), i + 200);
    ASSERT_TRUE(
        s.Send(std::vector<v1::Command>(std::make_move_iterator(chain.commands.begin() + i),
                                        std::make_move_iterator(chain.commands.begin() + end))));
  }
  ExpectAddChainAnswers(s, chain, kN);
  EXPECT_TRUE(s.Close().ok());
}

// Note [Stream turns]: a request of more commands than one turn (256) runs over several turns,
// whole and in order, with its reads' replies in place.
TEST_F(SessionStreamTest, ARequestLongerThanATurnRunsWholeAndInOrder) {
  Stream s(*stream_stub_);
  ASSERT_TRUE(s.opened());
  constexpr uint64_t kN = 16;
  AddChain chain = MakeAddChain(s, 700, kN);  // One SessionRequest: 2 + 700 * 3 + 7 + 1.
  ASSERT_GT(chain.commands.size(), 2000u);
  ASSERT_TRUE(s.Send(std::move(chain.commands)));
  ExpectAddChainAnswers(s, chain, kN);
  EXPECT_TRUE(s.Close().ok());
}

// Note [Coalesced batches]: requests of one command each, sent without waiting, queue up behind
// the loop and join the batch waiting there: they still run whole, in order, each read answered
// in its place.
TEST_F(SessionStreamTest, OneCommandRequestsQueuedBehindTheLoopRunInOrder) {
  Stream s(*stream_stub_);
  ASSERT_TRUE(s.opened());
  constexpr uint64_t kN = 256;
  AddChain chain = MakeAddChain(s, 1500, kN);
  for (v1::Command& command : chain.commands) {
    std::vector<v1::Command> one;
    one.push_back(std::move(command));
    ASSERT_TRUE(s.Send(std::move(one)));
  }
  ExpectAddChainAnswers(s, chain, kN);
  EXPECT_TRUE(s.Close().ok());
}

TEST_F(SessionStreamTest, FailedExecutePoisonsItsOutputWithTheOriginalError) {
  Stream s(*stream_stub_);
  ASSERT_TRUE(s.opened());
  constexpr uint64_t kN = 8;
  const uint64_t a = s.NewId(), out = s.NewId(), good = s.NewId(), next = s.NewId();
  const uint64_t missing = s.NewId() + 1000;  // Never created.
  const uint64_t bad_seq = 10;
  ASSERT_TRUE(s.Send({Create(1, a, FloatBytes(std::vector<float>(kN, 2.0f))), Empty(2, out, kN * 4),
                      Empty(3, good, kN * 4), Empty(4, next, kN * 4),
                      Add(bad_seq, a, missing, out, kN),          // Fails: rhs is no handle.
                      Read(11, out),                              // The original error.
                      Add(12, a, a, good, kN),                    // Later good work still runs.
                      Read(13, good), Add(14, out, a, next, kN),  // Reads a poisoned input.
                      Read(15, next), Sync(16), Sync(17)}));
  const std::string prefix = absl::StrCat("command ", bad_seq, " (execute) failed: ");
  v1::Reply r = s.Next();
  EXPECT_EQ(r.seq(), 11u);
  EXPECT_EQ(r.code(), grpc::NOT_FOUND);
  EXPECT_TRUE(absl::StartsWith(r.message(), prefix)) << r.message();
  EXPECT_TRUE(absl::StrContains(r.message(), absl::StrCat("handle ", missing))) << r.message();

  r = s.Next();
  EXPECT_EQ(r.seq(), 13u);
  ASSERT_EQ(r.code(), 0) << r.message();
  EXPECT_EQ(Floats(r.read().data(0)), std::vector<float>(kN, 4.0f));

  r = s.Next();  // The poison spreads through the execute that read it, unchanged.
  EXPECT_EQ(r.seq(), 15u);
  EXPECT_EQ(r.code(), grpc::NOT_FOUND);
  EXPECT_TRUE(absl::StartsWith(r.message(), prefix)) << r.message();

  r = s.Next();  // Both executes failed; the first is reported, with the count.
  EXPECT_EQ(r.seq(), 16u);
  EXPECT_EQ(r.code(), grpc::NOT_FOUND);
  EXPECT_EQ(r.failed_commands(), 2u);
  EXPECT_TRUE(absl::StartsWith(r.message(), prefix)) << r.message();
  EXPECT_TRUE(absl::StrContains(r.message(), "2 commands failed")) << r.message();

  r = s.Next();  // Reported once.
  EXPECT_EQ(r.seq(), 17u);
  EXPECT_EQ(r.code(), 0) << r.message();
  EXPECT_EQ(r.failed_commands(), 0u);

  // Releasing a poisoned handle removes it; the id can be used again.
  ASSERT_TRUE(
      s.Send({Release(18, out), Read(19, out), Create(20, out, "abcd"), Read(21, out), Sync(22)}));
  r = s.Next();
  EXPECT_EQ(r.seq(), 19u);
  EXPECT_EQ(r.code(), grpc::NOT_FOUND);
  EXPECT_FALSE(absl::StrContains(r.message(), "failed:")) << r.message();
  r = s.Next();
  EXPECT_EQ(r.seq(), 21u);
  ASSERT_EQ(r.code(), 0) << r.message();
  EXPECT_EQ(r.read().data(0), "abcd");
  r = s.Next();
  EXPECT_EQ(r.code(), 0) << r.message();
  EXPECT_TRUE(s.Close().ok());
}

TEST_F(SessionStreamTest, ExecuteWithNoKernelPoisonsNothing) {
  Stream s(*stream_stub_);
  ASSERT_TRUE(s.opened());
  const uint64_t a = s.NewId(), b = s.NewId();
  v1::Command none;  // Bindings, but no kernel: it would write nothing.
  none.set_seq(3);
  none.mutable_execute()->mutable_count()->mutable_static_count()->set_x(1);
  for (uint64_t h : {a, b})
    none.mutable_execute()->mutable_bindings()->add_buffers()->set_handle(h);
  ASSERT_TRUE(
      s.Send({Create(1, a, "abcd"), Create(2, b, "efgh"), none, Read(4, a), Read(5, b), Sync(6)}));
  v1::Reply r = s.Next();
  EXPECT_EQ(r.seq(), 4u);
  ASSERT_EQ(r.code(), 0) << r.message();
  EXPECT_EQ(r.read().data(0), "abcd");
  r = s.Next();
  EXPECT_EQ(r.seq(), 5u);
  ASSERT_EQ(r.code(), 0) << r.message();
  EXPECT_EQ(r.read().data(0), "efgh");
  r = s.Next();
  EXPECT_EQ(r.code(), grpc::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(r.message(), "command 3 (execute) failed: kernel: no kernel set"))
      << r.message();
  EXPECT_EQ(r.failed_commands(), 1u);
  EXPECT_TRUE(s.Close().ok());
}

TEST_F(SessionStreamTest, FailedCreatePoisonsItsNewId) {
  Stream s(*stream_stub_);
  ASSERT_TRUE(s.opened());
  const uint64_t t = s.NewId(), big = s.NewId();
  v1::Command bad_tensor;
  bad_tensor.set_seq(1);
  bad_tensor.mutable_create_tensor()->set_id(t);
  bad_tensor.mutable_create_tensor()->set_data("12345");  // 5 bytes for a 2x2 f32 tensor.
  bad_tensor.mutable_create_tensor()->add_shape(2);
  bad_tensor.mutable_create_tensor()->add_shape(2);
  bad_tensor.mutable_create_tensor()->set_elem_size(4);
  ASSERT_TRUE(
      s.Send({bad_tensor, Read(2, t), Empty(3, big, uint64_t{1} << 40), Read(4, big), Sync(5)}));
  v1::Reply r = s.Next();  // create_tensor answers with its layout, here its error.
  EXPECT_EQ(r.seq(), 1u);
  EXPECT_EQ(r.code(), grpc::INVALID_ARGUMENT);
  r = s.Next();
  EXPECT_EQ(r.seq(), 2u);
  EXPECT_EQ(r.code(), grpc::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StartsWith(r.message(), "command 1 (create_tensor) failed: data: 5 bytes"))
      << r.message();
  r = s.Next();
  EXPECT_EQ(r.seq(), 4u);
  EXPECT_TRUE(absl::StartsWith(r.message(), "command 3 (empty) failed: ")) << r.message();
  EXPECT_NE(r.code(), 0);
  r = s.Next();
  EXPECT_EQ(r.failed_commands(), 2u);
  EXPECT_TRUE(s.Close().ok());
}

TEST_F(SessionStreamTest, ClientIdsMustHaveTheTopBitAndBeFree) {
  Stream s(*stream_stub_);
  ASSERT_TRUE(s.opened());
  const uint64_t id = s.NewId();
  ASSERT_TRUE(s.Send({Create(1, 5, "low"), Sync(2)}));
  v1::Reply r = s.Next();
  EXPECT_EQ(r.code(), grpc::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(r.message(), "command 1 (create) failed: id: 5 is not a client id"))
      << r.message();

  ASSERT_TRUE(s.Send({Create(3, id, "first"), Create(4, id, "second"), Read(5, id), Sync(6)}));
  r = s.Next();  // The duplicate did not touch the first handle.
  EXPECT_EQ(r.seq(), 5u);
  ASSERT_EQ(r.code(), 0) << r.message();
  EXPECT_EQ(r.read().data(0), "first");
  r = s.Next();
  EXPECT_EQ(r.code(), grpc::FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StrContains(r.message(), "already in use")) << r.message();
  EXPECT_EQ(r.failed_commands(), 1u);

  // seq must strictly increase.
  ASSERT_TRUE(s.Send({Read(6, id), Sync(7)}));
  r = s.Next();
  EXPECT_EQ(r.code(), grpc::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(r.message(), "seq: 6 is not greater")) << r.message();
  r = s.Next();
  EXPECT_EQ(r.code(), 0) << r.message();

  // A repeated seq and an id in use: the seq's error is the one reported (docs/api.md), and the
  // handle is untouched.
  ASSERT_TRUE(s.Send({Create(7, id, "third"), Read(8, id), Sync(9)}));
  r = s.Next();
  EXPECT_EQ(r.seq(), 8u);
  ASSERT_EQ(r.code(), 0) << r.message();
  EXPECT_EQ(r.read().data(0), "first");
  r = s.Next();
  EXPECT_EQ(r.code(), grpc::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(r.message(), "seq: 7 is not greater")) << r.message();

  // The daemon's own ids (unary calls in the same session) never have the top bit set.
  for (int i = 0; i < 50; ++i) {
    uint64_t handle = 0;
    ASSERT_TRUE(UnaryCreate(s.session(), &handle).ok());
    EXPECT_LT(handle, kFirstClientId);
    EXPECT_NE(handle, 0u);
  }
  EXPECT_TRUE(s.Close().ok());
}

TEST_F(SessionStreamTest, StreamEndClosesTheSessionAndFreesItsMemory) {
  const v1::MemoryUsage before = Usage();
  uint64_t session = 0;
  {
    Stream s(*stream_stub_);
    ASSERT_TRUE(s.opened());
    session = s.session();
    std::vector<v1::Command> batch;
    for (int i = 0; i < 10; ++i) batch.push_back(Empty(s.NextSeq(), s.NewId(), 1 << 20));
    batch.push_back(Sync(s.NextSeq()));
    ASSERT_TRUE(s.Send(std::move(batch)));
    EXPECT_EQ(s.Next().code(), 0);
    EXPECT_GE(Usage().bytes_in_use(), before.bytes_in_use() + (10u << 20));
    ASSERT_TRUE(UnaryCreate(session).ok());  // The session is an ordinary one meanwhile.
    EXPECT_TRUE(s.Close().ok());
  }
  EXPECT_EQ(UnaryCreate(session).error_code(), grpc::NOT_FOUND);
  EXPECT_TRUE(UsageReturnsTo(before.bytes_in_use(), before.number_allocs()));
}

TEST_F(SessionStreamTest, CancellingTheStreamFreesEverything) {
  const v1::MemoryUsage before = Usage();
  uint64_t session = 0;
  {
    Stream s(*stream_stub_);
    ASSERT_TRUE(s.opened());
    session = s.session();
    std::vector<v1::Command> batch;
    const uint64_t id = s.NewId();
    batch.push_back(Create(s.NextSeq(), id, std::string(1 << 20, 'x')));
    for (int i = 0; i < 20; ++i) batch.push_back(Empty(s.NextSeq(), s.NewId(), 1 << 20));
    batch.push_back(Sync(s.NextSeq()));
    ASSERT_TRUE(s.Send(std::move(batch)));
    EXPECT_EQ(s.Next().code(), 0);
    // Leave reads unanswered in flight, then cancel.
    batch.clear();
    for (int i = 0; i < 200; ++i) batch.push_back(Read(s.NextSeq(), id));
    s.Send(std::move(batch));
    s.context().TryCancel();
    EXPECT_EQ(s.rw().Finish().error_code(), grpc::CANCELLED);
  }
  EXPECT_TRUE(UsageReturnsTo(before.bytes_in_use(), before.number_allocs()));
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  while (UnaryCreate(session).ok() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(UnaryCreate(session).error_code(), grpc::NOT_FOUND);
}

// Reads what is left of `s` (until it ends, or `deadline` passes) and returns its status.
grpc::Status DrainUntilEnd(Stream& s) {
  v1::SessionResponse resp;
  while (s.rw().Read(&resp)) {
  }
  return s.rw().Finish();
}

TEST_F(SessionStreamTest, StreamEndsAtOnceWhenItsLeasePasses) {
  const v1::MemoryUsage before = Usage();
  Stream s(*stream_stub_, /*device=*/0, /*lease_ms=*/500);
  ASSERT_TRUE(s.opened());
  ASSERT_TRUE(s.Send({Empty(s.NextSeq(), s.NewId(), 1 << 20), Sync(s.NextSeq())}));
  EXPECT_EQ(s.Next().code(), 0);
  s.context().set_deadline(In(absl::Seconds(10)));  // Never reached when the stream ends.
  // Idle: the lease passes, the daemon closes the session, and the stream ends with it.
  const absl::Time start = absl::Now();
  const grpc::Status status = DrainUntilEnd(s);
  EXPECT_EQ(status.error_code(), grpc::NOT_FOUND) << status.error_message();
  EXPECT_TRUE(absl::StrContains(status.error_message(), "lease")) << status.error_message();
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_TRUE(UsageReturnsTo(before.bytes_in_use(), before.number_allocs()));
}

TEST_F(SessionStreamTest, StreamEndsAtOnceWhenCloseSessionNamesIt) {
  const v1::MemoryUsage before = Usage();
  Stream s(*stream_stub_);
  ASSERT_TRUE(s.opened());
  ASSERT_TRUE(s.Send({Empty(s.NextSeq(), s.NewId(), 1 << 20), Sync(s.NextSeq())}));
  EXPECT_EQ(s.Next().code(), 0);
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(absl::Seconds(5)));
    v1::CloseSessionRequest req;
    req.set_session(s.session());
    v1::CloseSessionResponse resp;
    ASSERT_TRUE(compute_->CloseSession(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.handles_released(), 1u);
  }
  s.context().set_deadline(In(absl::Seconds(10)));
  const grpc::Status status = DrainUntilEnd(s);
  EXPECT_EQ(status.error_code(), grpc::NOT_FOUND) << status.error_message();
  EXPECT_TRUE(absl::StrContains(status.error_message(), "CloseSession")) << status.error_message();
  EXPECT_TRUE(UsageReturnsTo(before.bytes_in_use(), before.number_allocs()));
}

// A read_tensor whose bindings each pass their own checks but whose sizes overflow 64 bits in
// total (four tensors of 2^62 bytes, stride 0 over 4 bytes): the command fails, the daemon lives.
TEST_F(SessionStreamTest, ReadTensorWhoseSizesOverflowFailsAndTheDaemonLives) {
  Stream s(*stream_stub_);
  ASSERT_TRUE(s.opened());
  const uint64_t id = s.NewId();
  v1::Command read;
  read.set_seq(2);
  for (int i = 0; i < 4; ++i) {
    v1::BindingWithMeta* b = read.mutable_read_tensor()->add_bindings();
    b->mutable_binding()->set_handle(id);
    b->add_shape(uint64_t{1} << 60);
    b->add_strides(0);
    b->set_elem_size(4);
  }
  v1::Command create = Create(1, id, "AAAA");
  ASSERT_TRUE(s.Send({std::move(create), std::move(read), Read(3, id)}));
  const v1::Reply failed = s.Next();
  EXPECT_EQ(failed.seq(), 2u);
  EXPECT_EQ(failed.code(), static_cast<int>(grpc::INVALID_ARGUMENT)) << failed.message();
  EXPECT_TRUE(absl::StrContains(failed.message(), "overflows")) << failed.message();
  const v1::Reply ok = s.Next();  // The stream, its session and the daemon still serve.
  EXPECT_EQ(ok.code(), 0) << ok.message();
  ASSERT_EQ(ok.read().data_size(), 1);
  EXPECT_EQ(ok.read().data(0), "AAAA");
  EXPECT_TRUE(s.Close().ok());
}

TEST_F(SessionStreamTest, ProtocolErrorsEndTheStream) {
  {
    grpc::ClientContext ctx;
    auto rw = stream_stub_->Session(&ctx);
    v1::SessionRequest req;
    *req.add_commands() = Sync(1);
    rw->Write(req);
    rw->WritesDone();
    v1::SessionResponse resp;
    EXPECT_FALSE(rw->Read(&resp));
    grpc::Status s = rw->Finish();
    EXPECT_EQ(s.error_code(), grpc::INVALID_ARGUMENT);
    EXPECT_TRUE(absl::StrContains(s.error_message(), "must carry open")) << s.error_message();
  }
  {
    grpc::ClientContext ctx;
    auto rw = stream_stub_->Session(&ctx);
    v1::SessionRequest req;
    req.mutable_open()->set_device(7);
    rw->Write(req);
    v1::SessionResponse resp;
    EXPECT_FALSE(rw->Read(&resp));
    grpc::Status s = rw->Finish();
    EXPECT_EQ(s.error_code(), grpc::NOT_FOUND);
    EXPECT_TRUE(absl::StrContains(s.error_message(), "device 7")) << s.error_message();
  }
}

TEST_F(SessionStreamTest, OtherRepliesCarryTheirResults) {
  Stream s(*stream_stub_);
  ASSERT_TRUE(s.opened());
  v1::Command tensor;
  tensor.set_seq(1);
  tensor.mutable_empty_tensor()->set_id(s.NewId());
  tensor.mutable_empty_tensor()->add_shape(3);
  tensor.mutable_empty_tensor()->add_shape(5);
  tensor.mutable_empty_tensor()->set_elem_size(4);
  v1::Command usage, start, end;
  usage.set_seq(2);
  usage.mutable_memory_usage();
  start.set_seq(3);
  start.mutable_start_profile();
  end.set_seq(4);
  end.mutable_end_profile();
  ASSERT_TRUE(s.Send({tensor, usage, start, end}));
  v1::Reply r = s.Next();
  ASSERT_EQ(r.code(), 0) << r.message();
  ASSERT_EQ(r.tensor().strides_size(), 2);
  EXPECT_EQ(r.tensor().strides(1), 1u);
  EXPECT_GE(r.tensor().strides(0), 5u);
  EXPECT_GE(r.tensor().size(), 60u);
  r = s.Next();
  ASSERT_EQ(r.code(), 0) << r.message();
  EXPECT_GE(r.memory_usage().bytes_in_use(), 60u);
  r = s.Next();
  EXPECT_EQ(r.seq(), 4u);
  EXPECT_EQ(r.code(), 0) << r.message();
  EXPECT_EQ(r.result_case(), v1::Reply::kDurationNs);
  EXPECT_TRUE(s.Close().ok());
}

// A client that floods reads and does not read the replies: the daemon's memory stays bounded
// (Note [Stream backpressure]), other sessions keep being answered, and once the client reads,
// every reply arrives, in order.
TEST_F(SessionStreamTest, FloodingClientIsHeldBackWithoutStarvingOthers) {
  const uint64_t rss_before = RssBytes(daemon_->pid());
  ASSERT_GT(rss_before, 0u);
  Stream s(*stream_stub_);
  ASSERT_TRUE(s.opened());
  constexpr size_t kBytes = 64 << 10;  // 20000 reads of 64 KiB: 1.3 GB if nothing held back.
  constexpr int kReads = 20000;
  const uint64_t id = s.NewId();
  ASSERT_TRUE(s.Send({Create(s.NextSeq(), id, std::string(kBytes, 'z'))}));
  std::vector<uint64_t> seqs;
  std::vector<std::vector<v1::Command>> batches;
  for (int i = 0; i < kReads; i += 100) {
    batches.emplace_back();
    for (int j = 0; j < 100; ++j) {
      seqs.push_back(s.NextSeq());
      batches.back().push_back(Read(seqs.back(), id));
    }
  }
  std::atomic<bool> written{false};
  std::thread writer([&] {
    for (auto& b : batches) {
      if (!s.Send(std::move(b))) return;
    }
    written = true;
  });
  struct JoinOnExit {  // An early ASSERT still stops and joins the writer.
    Stream& s;
    std::thread& t;
    ~JoinOnExit() {
      if (t.joinable()) {
        s.context().TryCancel();
        t.join();
      }
    }
  } join_on_exit{s, writer};

  // Another session's unary calls keep answering, and the daemon stays bounded.
  uint64_t other = 0;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(absl::Seconds(2)));
    v1::OpenSessionResponse resp;
    ASSERT_TRUE(compute_->OpenSession(&ctx, v1::OpenSessionRequest(), &resp).ok());
    other = resp.session();
  }
  uint64_t max_rss = 0;
  const absl::Time until = absl::Now() + absl::Seconds(3);
  int calls = 0;
  while (absl::Now() < until) {
    uint64_t handle = 0;
    const absl::Time start = absl::Now();
    grpc::Status st = UnaryCreate(other, &handle);
    ASSERT_TRUE(st.ok()) << st.error_message();
    grpc::ClientContext ctx;
    ctx.set_deadline(In(absl::Seconds(2)));
    v1::ReadRequest req;
    req.set_session(other);
    req.add_bindings()->set_handle(handle);
    v1::ReadResponse resp;
    st = compute_->Read(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(resp.data(0), "abcd");
    EXPECT_LT(absl::Now() - start, absl::Seconds(2));
    ++calls;
    max_rss = std::max(max_rss, RssBytes(daemon_->pid()));
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_GT(calls, 10);
  // Bound: 256 MiB of replies in flight plus the daemon's own growth; far below 1.3 GB.
  EXPECT_LT(max_rss, rss_before + (uint64_t{640} << 20))
      << "daemon RSS grew from " << rss_before << " to " << max_rss;

  // Now read: every reply arrives, in order, and the flood completes.
  for (int i = 0; i < kReads; ++i) {
    v1::Reply r = s.Next();
    ASSERT_EQ(r.seq(), seqs[i]);
    ASSERT_EQ(r.code(), 0) << r.message();
    ASSERT_EQ(r.read().data(0).size(), kBytes);
  }
  writer.join();
  EXPECT_TRUE(written);
  EXPECT_TRUE(s.Close().ok());
}

}  // namespace
