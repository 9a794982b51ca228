// Lanes of bulk transfers (Note [Bulk lanes], server/service/stream/bulk_transfers.h): one bulk
// command's bytes on several Upload / Download calls at once, against the real daemon. Round
// trips through the SDK at sizes that give 1 .. 4 lanes, lanes arriving in any order on raw
// calls, the chunks of a download dealt over its lanes, and every bad lane input failing its
// command clearly with nothing left behind.

#include "common/bulk_lanes.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "tests/transfer/bulk_transfer_fixture.h"

namespace cubed::bulk_testing {
namespace {

constexpr uint64_t kKiB = uint64_t{1} << 10;

// What one raw Download lane received: its chunks' (binding, offset, data), and its status.
struct LaneDownload {
  std::vector<std::vector<uint64_t>> sizes;  // Of each chunk that had any.
  std::vector<v1::DownloadChunk> chunks;
  grpc::Status status;
};

class BulkLanesTest : public BulkTransferTest {
 protected:
  // Downloads lane `lane` of `lanes` of read `seq` on a channel of its own.
  LaneDownload DownloadLane(uint64_t session, uint64_t seq, uint32_t lane, uint32_t lanes,
                            uint64_t chunk_bytes) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto channel = grpc::CreateCustomChannel(daemon_->unix_address(),
                                             grpc::InsecureChannelCredentials(), args);
    auto stub = v1::SessionStream::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::DownloadRequest request;
    request.set_session(session);
    request.set_seq(seq);
    request.set_chunk_bytes(chunk_bytes);
    request.set_lane(lane);
    request.set_lanes(lanes);
    auto reader = stub->Download(&context, request);
    LaneDownload out;
    v1::DownloadChunk chunk;
    while (reader->Read(&chunk)) {
      if (chunk.sizes_size() > 0)
        out.sizes.emplace_back(chunk.sizes().begin(), chunk.sizes().end());
      out.chunks.push_back(chunk);
    }
    out.status = reader->Finish();
    return out;
  }

  // The chunks of lane `lane` of `lanes` of an upload of `bytes` (total) for `seq`, in
  // `chunk`-byte pieces, as UploadLaneRange cuts them.
  static std::vector<v1::UploadChunk> LaneChunks(uint64_t session, uint64_t seq,
                                                 const std::string& bytes, uint32_t lane,
                                                 uint32_t lanes, uint64_t chunk) {
    absl::StatusOr<BulkLaneRange> range = UploadLaneRange(bytes.size(), lanes, lane);
    EXPECT_TRUE(range.ok()) << range.status();
    std::vector<v1::UploadChunk> out;
    for (uint64_t o = range->begin; o < range->end; o += chunk) {
      const uint64_t n = std::min(chunk, range->end - o);
      out.push_back(o == range->begin
                        ? Chunk(session, seq, bytes.size(), o, bytes.substr(o, n), lane, lanes)
                        : Chunk(0, 0, 0, o, bytes.substr(o, n)));
    }
    return out;
  }
};

TEST_F(BulkLanesTest, SdkRoundTripsOnOneToFourLanes) {
  // 1 MiB lanes: 1 byte and 1.5 MiB take one lane, 2 MiB + 1 two, 64 MiB + 3 four.
  std::unique_ptr<cubed::Client> c = Connect(1, 256 * kKiB, cubed::Transport::kStream, 4, kMiB);
  ASSERT_NE(c, nullptr);
  for (uint64_t size : {uint64_t{1}, 3 * kMiB / 2, 2 * kMiB + 1, 3 * kMiB + 7, 64 * kMiB + 3}) {
    SCOPED_TRACE(size);
    const std::string bytes = Pattern(size, size);
    absl::StatusOr<cubed::Handle> h = c->Create(Bytes(bytes));
    ASSERT_TRUE(h.ok()) << h.status();
    absl::StatusOr<std::vector<std::string>> back = c->Read({cubed::Binding(*h)}).get();
    ASSERT_TRUE(back.ok()) << back.status();
    ASSERT_EQ(back->size(), 1u);
    EXPECT_TRUE((*back)[0] == bytes);
  }
  // Two bindings in one read, dealt over the lanes together.
  const std::string x = Pattern(5 * kMiB + 1, 7), y = Pattern(9 * kMiB - 5, 8);
  absl::StatusOr<cubed::Handle> hx = c->Create(Bytes(x));
  absl::StatusOr<cubed::Handle> hy = c->Create(Bytes(y));
  ASSERT_TRUE(hx.ok() && hy.ok());
  absl::StatusOr<std::vector<std::string>> both =
      c->Read({cubed::Binding(*hx), cubed::Binding(*hy)}).get();
  ASSERT_TRUE(both.ok()) << both.status();
  ASSERT_EQ(both->size(), 2u);
  EXPECT_TRUE((*both)[0] == x);
  EXPECT_TRUE((*both)[1] == y);
  c.reset();
  EXPECT_EQ(BytesInUse(), 0u);
}

TEST_F(BulkLanesTest, ReadIntoLandsInTheCallersMemory) {
  for (cubed::Transport transport : {cubed::Transport::kStream, cubed::Transport::kUnary}) {
    SCOPED_TRACE(transport == cubed::Transport::kStream ? "stream (lanes)" : "unary (copied in)");
    std::unique_ptr<cubed::Client> c = Connect(1, 256 * kKiB, transport, 4, kMiB);
    ASSERT_NE(c, nullptr);
    const std::string bytes = Pattern(24 * kMiB + 5, 21);
    absl::StatusOr<cubed::Handle> h = c->Create(Bytes(bytes));
    ASSERT_TRUE(h.ok()) << h.status();
    std::string out(bytes.size() + 3, 'x');
    auto into = absl::MakeSpan(reinterpret_cast<uint8_t*>(out.data()), out.size());
    absl::StatusOr<uint64_t> n = c->ReadInto(cubed::Binding(*h), into).get();
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_EQ(*n, bytes.size());
    EXPECT_TRUE(out.substr(0, bytes.size()) == bytes);
    EXPECT_EQ(out.substr(bytes.size()), "xxx");  // Nothing past the read.
    // A view: 7 bytes off the front, 2 MiB off the back.
    n = c->ReadInto(cubed::Binding(*h, 7, 2 * kMiB), into).get();
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_EQ(*n, bytes.size() - 7 - 2 * kMiB);
    EXPECT_TRUE(out.substr(0, *n) == bytes.substr(7, *n));
    // Too little room: OUT_OF_RANGE.
    n = c->ReadInto(cubed::Binding(*h), into.subspan(0, kMiB)).get();
    EXPECT_EQ(n.status().code(), absl::StatusCode::kOutOfRange) << n.status();
    c.reset();
    EXPECT_EQ(BytesInUse(), 0u);
  }
}

// Messages smaller than a default chunk: the chunks shrink to fit them (before, the first chunk
// failed on this side and the create waited for bytes that never came).
TEST_F(BulkLanesTest, ChunksFitTheMessageLimit) {
  cubed::ClientOptions o;
  o.address = daemon_->unix_address();
  o.region_threshold = 0;
  o.bulk_threshold = 1;
  o.max_message_bytes = static_cast<int>(kMiB);
  o.timeout = absl::Seconds(20);
  absl::StatusOr<std::unique_ptr<cubed::Client>> c = cubed::Client::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string bytes = Pattern(3 * kMiB + 1, 22);
  absl::StatusOr<cubed::Handle> h = (*c)->Create(Bytes(bytes));
  ASSERT_TRUE(h.ok()) << h.status();
  absl::StatusOr<std::vector<std::string>> back = (*c)->Read({cubed::Binding(*h)}).get();
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE((*back)[0] == bytes);
}

TEST_F(BulkLanesTest, UploadLanesArriveInAnyOrder) {
  auto raw = OpenRaw();
  const uint64_t s = raw->session;
  const std::string bytes = Pattern(200 * kKiB + 5, 11);  // Lanes [0, 128 Ki), [128 Ki, end).
  raw->Send({BulkCreate(1, kFirstClientId + 1, bytes.size())});
  grpc::Status second;
  std::thread late([&] { second = Upload(LaneChunks(s, 1, bytes, 1, 2, 48 * kKiB)); });
  absl::SleepFor(absl::Milliseconds(100));  // Lane 1 first; the create waits for lane 0.
  const grpc::Status first = Upload(LaneChunks(s, 1, bytes, 0, 2, 48 * kKiB));
  late.join();
  EXPECT_TRUE(first.ok()) << first.error_message();
  EXPECT_TRUE(second.ok()) << second.error_message();
  raw->Send({Read(2, kFirstClientId + 1, false)});
  const v1::Reply r = raw->Await(2);
  ASSERT_EQ(r.code(), 0) << r.message();
  ASSERT_EQ(r.read().data_size(), 1);
  EXPECT_TRUE(r.read().data(0) == bytes);
}

TEST_F(BulkLanesTest, DownloadChunksAreDealtOverTheLanes) {
  auto raw = OpenRaw();
  const uint64_t s = raw->session;
  const std::string x = Pattern(700 * kKiB + 3, 12), y = Pattern(300 * kKiB, 13);
  raw->Send(
      {BulkCreate(1, kFirstClientId + 1, x.size()), BulkCreate(2, kFirstClientId + 2, y.size())});
  ASSERT_TRUE(Upload({Chunk(s, 1, x.size(), 0, x)}).ok());
  ASSERT_TRUE(Upload({Chunk(s, 2, y.size(), 0, y)}).ok());
  v1::Command read = Read(3, kFirstClientId + 1, true);
  read.mutable_read()->add_bindings()->set_handle(kFirstClientId + 2);
  raw->Send({read});
  constexpr uint32_t kLanes = 3;
  std::vector<LaneDownload> lanes(kLanes);
  std::vector<std::thread> threads;
  for (uint32_t lane = 0; lane < kLanes; ++lane) {
    threads.emplace_back([&, lane] { lanes[lane] = DownloadLane(s, 3, lane, kLanes, 64 * kKiB); });
  }
  for (std::thread& t : threads) t.join();
  std::string got[2] = {std::string(x.size(), '\0'), std::string(y.size(), '\0')};
  uint64_t copied = 0;
  for (uint32_t lane = 0; lane < kLanes; ++lane) {
    SCOPED_TRACE(lane);
    EXPECT_TRUE(lanes[lane].status.ok()) << lanes[lane].status.error_message();
    // Every lane's first chunk says the sizes; no other chunk does.
    ASSERT_FALSE(lanes[lane].chunks.empty());
    EXPECT_EQ(lanes[lane].sizes.size(), 1u);
    EXPECT_EQ(lanes[lane].chunks[0].sizes_size(), 2);
    for (const v1::DownloadChunk& c : lanes[lane].chunks) {
      if (c.data().empty()) continue;
      ASSERT_LT(c.binding(), 2u);
      ASSERT_LE(c.offset() + c.data().size(), got[c.binding()].size());
      got[c.binding()].replace(c.offset(), c.data().size(), c.data());
      copied += c.data().size();
    }
  }
  EXPECT_EQ(copied, x.size() + y.size());  // Each byte exactly once.
  EXPECT_TRUE(got[0] == x);
  EXPECT_TRUE(got[1] == y);
  EXPECT_EQ(raw->Await(3).code(), 0);
}

// Sends a 3 MiB bulk create as seq `seq` and uploads `lanes` (each a list of chunks) at once;
// returns each upload's status and the create's outcome (through a read of its id).
struct LaneOutcome {
  std::vector<grpc::Status> uploads;
  v1::Reply read;
};

TEST_F(BulkLanesTest, BadLanesFailTheCreateAndLeaveNothing) {
  auto raw = OpenRaw();
  const uint64_t s = raw->session;
  const std::string bytes = Pattern(3 * kMiB, 14);
  uint64_t seq = 0;
  auto attempt = [&](std::vector<std::vector<v1::UploadChunk>> lanes) {
    const uint64_t create = ++seq, id = kFirstClientId + create;
    raw->Send({BulkCreate(create, id, bytes.size())});
    LaneOutcome out;
    out.uploads.resize(lanes.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < lanes.size(); ++i) {
      threads.emplace_back([&, i] { out.uploads[i] = Upload(lanes[i]); });
    }
    for (std::thread& t : threads) t.join();
    const uint64_t read = ++seq;
    raw->Send({Read(read, id, false)});
    out.read = raw->Await(read);
    const uint64_t release = ++seq;
    raw->Send({Release(release, id)});
    return out;
  };
  auto expect_failed = [&](const LaneOutcome& out, absl::string_view what) {
    EXPECT_EQ(out.read.code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT))
        << out.read.message();
    EXPECT_TRUE(absl::StrContains(out.read.message(), what)) << out.read.message();
    for (const grpc::Status& u : out.uploads) {
      EXPECT_FALSE(u.ok());
      EXPECT_TRUE(absl::StrContains(u.error_message(), what)) << u.error_message();
    }
  };
  // 17 lanes; lane 2 of 2; lane 3 of 4 for 100 KiB would start past the end (at 192 KiB).
  expect_failed(attempt({{Chunk(s, seq + 1, bytes.size(), 0, bytes.substr(0, kMiB), 0, 17)}}),
                "lanes: 17 lanes");
  expect_failed(attempt({{Chunk(s, seq + 1, bytes.size(), 0, bytes.substr(0, kMiB), 2, 2)}}),
                "lane: lane 2 of 2");
  {
    const uint64_t create = ++seq, id = kFirstClientId + create;
    raw->Send({BulkCreate(create, id, 100 * kKiB)});
    const grpc::Status u = Upload({Chunk(s, create, 100 * kKiB, 0, bytes.substr(0, kKiB), 3, 4)});
    EXPECT_TRUE(absl::StrContains(u.error_message(), "without bytes")) << u.error_message();
    raw->Send({Read(++seq, id, false), Release(seq + 1, id)});
    const v1::Reply r = raw->Await(seq);
    ++seq;
    EXPECT_TRUE(absl::StrContains(r.message(), "without bytes")) << r.message();
  }
  // Lanes that disagree on the lane count.
  expect_failed(
      attempt({LaneChunks(s, seq + 1, bytes, 0, 2, kMiB),
               {Chunk(s, seq + 1, bytes.size(), 2 * kMiB, bytes.substr(2 * kMiB), 2, 3)}}),
      "agree");
  // Lane 1 sending from byte 0 instead of its first byte.
  {
    std::vector<v1::UploadChunk> wrong = LaneChunks(s, seq + 1, bytes, 1, 2, kMiB);
    wrong[0].set_offset(0);
    const LaneOutcome out = attempt({LaneChunks(s, seq + 1, bytes, 0, 2, kMiB), wrong});
    expect_failed(out, "next byte of lane 1");
  }
  // Lane 0 ending early (its last chunk missing).
  {
    std::vector<v1::UploadChunk> lane0 = LaneChunks(s, seq + 1, bytes, 0, 2, kMiB);
    lane0.pop_back();
    expect_failed(attempt({lane0, LaneChunks(s, seq + 1, bytes, 1, 2, kMiB)}),
                  "the upload ended after");
  }
  // After all that, a good two-lane create works and nothing was left behind by the others.
  const LaneOutcome good = attempt(
      {LaneChunks(s, seq + 1, bytes, 0, 2, kMiB), LaneChunks(s, seq + 1, bytes, 1, 2, kMiB)});
  for (const grpc::Status& u : good.uploads) EXPECT_TRUE(u.ok()) << u.error_message();
  ASSERT_EQ(good.read.code(), 0) << good.read.message();
  EXPECT_TRUE(good.read.read().data(0) == bytes);
  raw->Send({Sync(++seq)});
  (void)raw->Await(seq);
  EXPECT_EQ(BytesInUse(), 0u);
}

TEST_F(BulkLanesTest, ADuplicateLaneIsRefusedAndTheOthersGoOn) {
  auto raw = OpenRaw();
  const uint64_t s = raw->session;
  const std::string bytes = Pattern(2 * kMiB, 15);
  raw->Send({BulkCreate(1, kFirstClientId + 1, bytes.size())});
  grpc::Status lane0;
  std::thread first([&] { lane0 = Upload(LaneChunks(s, 1, bytes, 0, 2, kMiB)); });
  absl::SleepFor(absl::Milliseconds(100));
  const grpc::Status again = Upload(LaneChunks(s, 1, bytes, 0, 2, kMiB));
  EXPECT_EQ(again.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << again.error_message();
  EXPECT_TRUE(absl::StrContains(again.error_message(), "(lane 0)")) << again.error_message();
  const grpc::Status lane1 = Upload(LaneChunks(s, 1, bytes, 1, 2, kMiB));
  first.join();
  EXPECT_TRUE(lane0.ok()) << lane0.error_message();
  EXPECT_TRUE(lane1.ok()) << lane1.error_message();
  raw->Send({Read(2, kFirstClientId + 1, false)});
  const v1::Reply r = raw->Await(2);
  ASSERT_EQ(r.code(), 0) << r.message();
  EXPECT_TRUE(r.read().data(0) == bytes);
}

TEST_F(BulkLanesTest, ALaneCancelledBeforeItsCommandRanFailsTheCommand) {
  auto raw = OpenRaw();
  const uint64_t s = raw->session;
  const std::string bytes = Pattern(2 * kMiB, 17);
  {
    // Lane 0 of command 1 arrives first and is cancelled before the command was sent.
    grpc::ClientContext context;
    v1::UploadDone done;
    auto writer = stub_->Upload(&context, &done);
    ASSERT_TRUE(writer->Write(LaneChunks(s, 1, bytes, 0, 2, kMiB)[0]));
    absl::SleepFor(absl::Milliseconds(100));  // The daemon read the first chunk.
    context.TryCancel();
    EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  absl::SleepFor(absl::Milliseconds(100));
  raw->Send({BulkCreate(1, kFirstClientId + 1, bytes.size())});
  const grpc::Status lane1 = Upload(LaneChunks(s, 1, bytes, 1, 2, kMiB));
  EXPECT_EQ(lane1.error_code(), grpc::StatusCode::CANCELLED) << lane1.error_message();
  raw->Send({Read(2, kFirstClientId + 1, false), Sync(3)});
  const v1::Reply r = raw->Await(2);
  EXPECT_EQ(r.code(), static_cast<int>(grpc::StatusCode::CANCELLED)) << r.message();
  EXPECT_TRUE(absl::StrContains(r.message(), "before the command ran")) << r.message();
  EXPECT_EQ(raw->Await(3).code(), static_cast<int>(grpc::StatusCode::CANCELLED));  // It counts.
  raw->Send({Release(4, kFirstClientId + 1), Sync(5)});
  (void)raw->Await(5);
  EXPECT_EQ(BytesInUse(), 0u);
}

TEST_F(BulkLanesTest, BadDownloadLanesFailTheRead) {
  auto raw = OpenRaw();
  const uint64_t s = raw->session;
  const std::string bytes = Pattern(kMiB, 16);
  raw->Send({BulkCreate(1, kFirstClientId + 1, bytes.size())});
  ASSERT_TRUE(Upload({Chunk(s, 1, bytes.size(), 0, bytes)}).ok());
  // 17 lanes.
  raw->Send({Read(2, kFirstClientId + 1, true)});
  LaneDownload d = DownloadLane(s, 2, 0, 17, 0);
  EXPECT_EQ(d.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(d.status.error_message(), "lanes: 17")) << d.status.error_message();
  v1::Reply r = raw->Await(2);
  EXPECT_TRUE(absl::StrContains(r.message(), "lanes: 17")) << r.message();
  // Two lanes asking for different chunk sizes.
  raw->Send({Read(3, kFirstClientId + 1, true)});
  LaneDownload a, b;
  std::thread t([&] { a = DownloadLane(s, 3, 0, 2, 64 * kKiB); });
  b = DownloadLane(s, 3, 1, 2, 128 * kKiB);
  t.join();
  r = raw->Await(3);
  EXPECT_EQ(r.code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT)) << r.message();
  EXPECT_TRUE(absl::StrContains(r.message(), "agree")) << r.message();
  EXPECT_FALSE(a.status.ok());
  EXPECT_FALSE(b.status.ok());
  // The buffer is intact and readable after both.
  raw->Send({Read(4, kFirstClientId + 1, false)});
  r = raw->Await(4);
  ASSERT_EQ(r.code(), 0) << r.message();
  EXPECT_TRUE(r.read().data(0) == bytes);
  raw->Send({Release(5, kFirstClientId + 1), Sync(6)});
  (void)raw->Await(6);
  EXPECT_EQ(BytesInUse(), 0u);
}

}  // namespace
}  // namespace cubed::bulk_testing
