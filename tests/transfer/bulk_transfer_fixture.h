#pragma once

// The fixture of the bulk transfer tests (bulk_transfer_test.cc, bulk_lanes_test.cc): a real
// daemon, SDK clients, raw session streams and raw Upload / Download calls.

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "cubed/v1/compute.grpc.pb.h"
#include "cubed/v1/session.grpc.pb.h"
#include "grpcpp/impl/rpc_method.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/sync_stream.h"
#include "gtest/gtest.h"
#include "tests/testing/daemon_process.h"

namespace cubed::bulk_testing {

using ::cubed::testing::DaemonProcess;
namespace v1 = ::cubed::v1;

inline constexpr uint64_t kFirstClientId = uint64_t{1} << 63;
inline constexpr uint64_t kMiB = uint64_t{1} << 20;

// Peak resident memory of a process, bytes (VmHWM); 0 when unreadable.
inline uint64_t PeakRss(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, "VmHWM:")) continue;
    rest = absl::StripAsciiWhitespace(rest);
    absl::ConsumeSuffix(&rest, " kB");
    uint64_t kb = 0;
    if (absl::SimpleAtoi(rest, &kb)) return kb * 1024;
  }
  return 0;
}

// Deterministic bytes: word i of the buffer is a hash of (seed, i).
inline uint64_t Word(uint64_t seed, uint64_t i) {
  uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
  x ^= x >> 31;
  return x * 0xBF58476D1CE4E5B9ull;
}
inline std::string Pattern(uint64_t size, uint64_t seed) {
  std::string s(size, '\0');
  const uint64_t words = size / 8;
  for (uint64_t i = 0; i < words; ++i) {
    const uint64_t w = Word(seed, i);
    std::memcpy(s.data() + i * 8, &w, 8);
  }
  for (uint64_t i = words * 8; i < size; ++i) s[i] = static_cast<char>(Word(seed, i) & 0xff);
  return s;
}
inline absl::Span<const uint8_t> Bytes(const std::string& s) {
  return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

class BulkTransferTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DaemonProcess::Options o;
    o.flags = {"--memory_limit=3GiB", "--session_lease=60s"};
    absl::StatusOr<std::unique_ptr<DaemonProcess>> d = DaemonProcess::Start(o);
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = *std::move(d);
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    channel_ = grpc::CreateCustomChannel(daemon_->unix_address(),
                                         grpc::InsecureChannelCredentials(), args);
    stub_ = v1::SessionStream::NewStub(channel_);
  }

  // An SDK client; `lanes` and `lane_bytes` as ClientOptions::bulk_lanes, bulk_lane_bytes (0:
  // the SDK's default).
  std::unique_ptr<cubed::Client> Connect(uint64_t threshold, uint64_t chunk,
                                         cubed::Transport transport = cubed::Transport::kStream,
                                         uint32_t lanes = 0, uint64_t lane_bytes = 0) {
    cubed::ClientOptions o;
    o.address = daemon_->unix_address();
    o.transport = transport;
    o.bulk_threshold = threshold;
    o.region_threshold = 0;  // The chunked gRPC path, not shared memory (tests/region).
    o.bulk_chunk = chunk;
    if (lanes != 0) o.bulk_lanes = lanes;
    if (lane_bytes != 0) o.bulk_lane_bytes = lane_bytes;
    absl::StatusOr<std::unique_ptr<cubed::Client>> c = cubed::Client::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  // Bytes in use on device 0, through a unary client.
  uint64_t BytesInUse() {
    std::unique_ptr<cubed::Client> c = Connect(0, kMiB, cubed::Transport::kUnary);
    absl::StatusOr<cubed::MemoryUsage> u = c->GetMemoryUsage();
    EXPECT_TRUE(u.ok()) << u.status();
    return u.ok() ? u->bytes_in_use : ~uint64_t{0};
  }

  // A raw session stream.
  struct Raw {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionResponse>> stream;
    uint64_t session = 0;
    std::vector<v1::Reply> replies;
    void Send(std::vector<v1::Command> commands) {
      v1::SessionRequest r;
      for (auto& c : commands) *r.add_commands() = std::move(c);
      ASSERT_TRUE(stream->Write(r));
    }
    // Reads until the reply of `seq` arrived; a reply with code -1 when the stream ended first.
    v1::Reply Await(uint64_t seq) {
      for (;;) {
        for (const v1::Reply& r : replies) {
          if (r.seq() == seq) return r;
        }
        v1::SessionResponse response;
        if (!stream->Read(&response)) {
          v1::Reply ended;
          ended.set_code(-1);
          return ended;
        }
        for (v1::Reply& r : *response.mutable_replies()) replies.push_back(std::move(r));
      }
    }
  };
  std::unique_ptr<Raw> OpenRaw() {
    auto raw = std::make_unique<Raw>();
    raw->stream = stub_->Session(&raw->context);
    v1::SessionRequest open;
    open.mutable_open();
    EXPECT_TRUE(raw->stream->Write(open));
    v1::SessionResponse response;
    EXPECT_TRUE(raw->stream->Read(&response));
    raw->session = response.opened().session();
    return raw;
  }

  static v1::Command BulkCreate(uint64_t seq, uint64_t id, uint64_t size) {
    v1::Command c;
    c.set_seq(seq);
    c.mutable_create()->set_id(id);
    c.mutable_create()->set_bulk_size(size);
    return c;
  }
  static v1::Command Read(uint64_t seq, uint64_t id, bool bulk) {
    v1::Command c;
    c.set_seq(seq);
    c.mutable_read()->add_bindings()->set_handle(id);
    c.mutable_read()->set_bulk(bulk);
    return c;
  }
  static v1::Command Sync(uint64_t seq) {
    v1::Command c;
    c.set_seq(seq);
    c.mutable_sync();
    return c;
  }
  static v1::Command Release(uint64_t seq, uint64_t id) {
    v1::Command c;
    c.set_seq(seq);
    c.mutable_release()->add_ids(id);
    return c;
  }
  static v1::UploadChunk Chunk(uint64_t session, uint64_t seq, uint64_t total, uint64_t offset,
                               std::string data, uint32_t lane = 0, uint32_t lanes = 0) {
    v1::UploadChunk c;
    c.set_session(session);
    c.set_seq(seq);
    c.set_total_size(total);
    c.set_offset(offset);
    c.set_data(std::move(data));
    c.set_lane(lane);
    c.set_lanes(lanes);
    return c;
  }

  // Uploads `messages` as they are (raw bytes, possibly not an UploadChunk) and returns the
  // status.
  grpc::Status UploadRaw(const std::vector<std::string>& messages) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    grpc::ByteBuffer done;
    const grpc::internal::RpcMethod method("/cubed.v1.SessionStream/Upload",
                                           grpc::internal::RpcMethod::CLIENT_STREAMING, channel_);
    std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
        grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(channel_.get(), method,
                                                                      &context, &done));
    for (const std::string& m : messages) {
      grpc::Slice slice(m);
      if (!writer->Write(grpc::ByteBuffer(&slice, 1))) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }

  // Uploads `chunks` for (session, seq) and returns the status.
  grpc::Status Upload(const std::vector<v1::UploadChunk>& chunks) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::UploadDone done;
    auto writer = stub_->Upload(&context, &done);
    for (const auto& c : chunks) {
      if (!writer->Write(c)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }

  std::unique_ptr<DaemonProcess> daemon_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::SessionStream::Stub> stub_;
};

}  // namespace cubed::bulk_testing
