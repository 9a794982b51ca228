// The SDK over the session stream (ClientOptions::transport kStream): ordering while commands are
// pipelined, a failed execute surfacing later with the daemon's error, and that tiny commands
// are batched rather than paid for one round trip each.

#include <chrono>
#include <cstdlib>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/integration/integration_test.h"

namespace cubed::integration {
namespace {

using StreamClientTest = DaemonTest;

// A stream-mode client, or nullptr (and the test skipped) when CUBED_CLIENT_TRANSPORT=unary.
std::unique_ptr<Client> StreamClient(std::unique_ptr<Client> client) {
  if (client != nullptr && client->transport() != Transport::kStream) return nullptr;
  return client;
}

Tensor Scalar(Client& client, float v) {
  auto t = client.CreateTensor(ToBytes(std::vector<float>{v}), {1}, 4);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : Tensor{};
}

float ReadScalar(Client& client, const Tensor& t) {
  std::vector<float> v = FromBytes<float>(ReadTensorOrDie(client, t));
  return v.size() == 1 ? v[0] : -1.f;
}

TEST_F(StreamClientTest, TheDefaultTransportIsTheStreamUnlessTheEnvironmentSaysUnary) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  const char* env = std::getenv("CUBED_CLIENT_TRANSPORT");
  const bool unary = env != nullptr && std::string(env) == "unary";
  EXPECT_EQ(client->transport(), unary ? Transport::kUnary : Transport::kStream);
  ClientOptions joined;
  joined.session = client->session();
  auto second = Connect(joined);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->transport(), Transport::kUnary) << "joining a session uses unary calls";
}

TEST_F(StreamClientTest, AThousandPipelinedExecutesRunInOrderBeforeTheRead) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  Tensor one = Scalar(*client, 1.f);
  Tensor a = Scalar(*client, 0.f);
  Tensor b = Scalar(*client, 0.f);
  // a -> b -> a ...: each execute depends on the one before; any reordering changes the sum.
  for (int i = 0; i < 1000; ++i) {
    const bool even = i % 2 == 0;
    ASSERT_TRUE(
        client->Execute(Builtin("add", ElemType::kF32), {even ? a : b, one}, {even ? b : a}).ok());
  }
  EXPECT_EQ(ReadScalar(*client, a), 1000.f);
  EXPECT_EQ(ReadScalar(*client, b), 999.f);
}

TEST_F(StreamClientTest, AFailedExecuteSurfacesAtTheNextReadWithTheDaemonsError) {
  auto client = StreamClient(Connect());
  if (client == nullptr) GTEST_SKIP() << "unary transport: errors come back from Execute";
  Tensor in = Scalar(*client, 2.f);
  Tensor out = Scalar(*client, 0.f);
  Tensor fine = Scalar(*client, 5.f);
  // Returns at once; the daemon finds the unknown kernel later and poisons `out`.
  ASSERT_TRUE(client->Execute(Builtin("no_such_kernel", ElemType::kF32), {in}, {out}).ok());
  auto read = client->ReadTensor({out}).get();
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound) << read.status();
  EXPECT_TRUE(absl::StrContains(read.status().message(), "(execute) failed: ")) << read.status();
  EXPECT_TRUE(absl::StrContains(read.status().message(), "no_such_kernel")) << read.status();
  // Other handles are unaffected; the next sync reports the same original error once.
  EXPECT_EQ(ReadScalar(*client, fine), 5.f);
  absl::Status sync = client->Sync().get();
  EXPECT_EQ(sync.code(), read.status().code());
  EXPECT_TRUE(absl::StartsWith(sync.message(), read.status().message())) << sync;
  EXPECT_TRUE(absl::StrContains(sync.message(), "(1 command failed")) << sync;
  EXPECT_TRUE(client->Sync().get().ok()) << "sync forgets reported errors";
  // An execute reading the poisoned handle fails the same way and poisons its output.
  Tensor next = Scalar(*client, 0.f);
  ASSERT_TRUE(client->Execute(Builtin("copy", ElemType::kF32), {out}, {next}).ok());
  auto second = client->ReadTensor({next}).get();
  EXPECT_EQ(second.status(), read.status());
}

TEST_F(StreamClientTest, TenThousandTinyExecutesAndASyncFinishQuickly) {
  auto client = StreamClient(Connect());
  if (client == nullptr) GTEST_SKIP() << "unary transport: one round trip per execute";
  Tensor one = Scalar(*client, 1.f);
  Tensor a = Scalar(*client, 0.f);
  Tensor b = Scalar(*client, 0.f);
  const absl::Time start = absl::Now();
  for (int i = 0; i < 10000; ++i) {
    const bool even = i % 2 == 0;
    ASSERT_TRUE(
        client->Execute(Builtin("add", ElemType::kF32), {even ? a : b, one}, {even ? b : a}).ok());
  }
  absl::Status sync = client->Sync().get();
  const absl::Duration took = absl::Now() - start;
  ASSERT_TRUE(sync.ok()) << sync;
  EXPECT_LT(took, absl::Seconds(10)) << "10,000 executes + sync took " << took;
  EXPECT_EQ(ReadScalar(*client, a), 10000.f);
}

// Note [Serialized queue] (client/stream_transport.h): queued creates whose bytes add up to many
// times max_message_bytes go out in batches that each fit it (a batch past it would fail the
// whole stream: gRPC refuses to send it).
TEST_F(StreamClientTest, QueuedCreatesBeyondTheMessageLimitGoOutInBatchesThatFitIt) {
  ClientOptions options;
  options.max_message_bytes = 64 << 10;  // Three of the creates below at most.
  options.bulk_threshold = 32 << 10;     // The creates stay inline, on the stream.
  auto client = StreamClient(Connect(options));
  if (client == nullptr) GTEST_SKIP() << "stream transport only";
  constexpr int kCreates = 256;
  constexpr size_t kBytes = (20 << 10) + 3;  // Odd: batches split between unaligned commands.
  std::vector<std::vector<uint8_t>> data(kCreates, std::vector<uint8_t>(kBytes));
  for (int i = 0; i < kCreates; ++i) {
    for (size_t j = 0; j < kBytes; ++j) data[i][j] = static_cast<uint8_t>(i * 31 + j * 7);
  }
  // Queued faster than the writer's batch interval: without the byte bound, batches of dozens.
  std::vector<Handle> made;
  for (int i = 0; i < kCreates; ++i) {
    absl::StatusOr<Handle> h = client->Create(data[i]);
    ASSERT_TRUE(h.ok()) << h.status();
    made.push_back(*h);
  }
  absl::Status synced = client->Sync().get();
  ASSERT_TRUE(synced.ok()) << synced;
  for (int i = 0; i < kCreates; ++i) {
    ASSERT_EQ(ReadOrDie(*client, made[i]), std::string(data[i].begin(), data[i].end()))
        << "create " << i;
  }
}

// On the gRPC carrier a command larger than max_message_bytes alone is refused by Send, naming the
// limit, and the session goes on (gRPC would refuse to send it and end the stream with every handle
// in it).
TEST_F(StreamClientTest, ACommandOverTheMessageLimitIsRefusedAndTheSessionGoesOn) {
  ClientOptions options;
  options.max_message_bytes = 64 << 10;
  options.bulk_threshold = 1 << 20;  // The create stays inline, on the stream.
  auto client = StreamClient(Connect(options));
  if (client == nullptr) GTEST_SKIP() << "stream transport only";
  if (client->stream_carrier() == StreamCarrier::kRing) {
    GTEST_SKIP() << "gRPC's message limit; the command ring has its own";
  }
  absl::StatusOr<Handle> kept = client->Create(std::vector<uint8_t>(100, 7));
  ASSERT_TRUE(kept.ok()) << kept.status();
  absl::StatusOr<Handle> big = client->Create(std::vector<uint8_t>(100 << 10, 1));
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument) << big.status();
  EXPECT_TRUE(absl::StrContains(big.status().message(), "max_message_bytes")) << big.status();
  absl::Status synced = client->Sync().get();
  ASSERT_TRUE(synced.ok()) << synced;
  EXPECT_EQ(ReadOrDie(*client, *kept), std::string(100, 7));
  absl::StatusOr<Handle> after = client->Create(std::vector<uint8_t>(40 << 10, 3));
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(ReadOrDie(*client, *after), std::string(40 << 10, 3));
}

// Note [Answering commands write through] (client/stream_transport.h): reads written by their
// senders, executes queued for the writer, from several threads at once: each thread's read sees
// every execute it queued before it.
TEST_F(StreamClientTest, ThreadsMixingQueuedExecutesAndReadsSeeTheirOwnExecutes) {
  auto client = StreamClient(Connect());
  if (client == nullptr) GTEST_SKIP() << "stream transport only";
  constexpr int kThreads = 4;
  constexpr int kSteps = 300;
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      absl::StatusOr<Tensor> x = client->CreateTensor(ToBytes(std::vector<float>{0.f}), {1}, 4);
      absl::StatusOr<Tensor> one = client->CreateTensor(ToBytes(std::vector<float>{1.f}), {1}, 4);
      if (!x.ok() || !one.ok()) {
        errors[t] = "create failed";
        return;
      }
      for (int i = 1; i <= kSteps; ++i) {
        absl::Status run = client->Execute(Builtin("add", ElemType::kF32), {*x, *one}, {*x});
        if (!run.ok()) {
          errors[t] = run.ToString();
          return;
        }
        if (i % 7 != 0) continue;
        absl::StatusOr<std::vector<std::string>> got = client->Read({x->handle}).get();
        if (!got.ok() || got->size() != 1) {
          errors[t] = got.ok() ? "read: no data" : got.status().ToString();
          return;
        }
        const std::vector<float> v = FromBytes<float>((*got)[0]);
        if (v.size() != 1 || v[0] != static_cast<float>(i)) {
          errors[t] = absl::StrCat("read after ", i, " adds gave ", v.empty() ? -1.f : v[0]);
          return;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[t], "") << "thread " << t;
}

// A reply's callback runs on the SDK's reader thread; an answering command sent from there is
// handed to the writer thread instead of written through (Note [Answering commands write
// through]): a chain of 200 syncs, each sent from the previous one's callback, completes.
TEST_F(StreamClientTest, AnsweringCommandsSentFromReplyCallbacksComplete) {
  auto client = StreamClient(Connect());
  if (client == nullptr) GTEST_SKIP() << "stream transport only";
  constexpr int kChain = 200;
  std::promise<absl::Status> done;
  std::function<void(int)> send = [&](int left) {
    v1::Command sync;
    sync.mutable_sync();
    absl::Status sent =
        client->SendStreamCommand(std::move(sync), [&, left](absl::StatusOr<v1::Reply*> reply) {
          if (!reply.ok()) {
            done.set_value(reply.status());
          } else if (left == 0) {
            done.set_value(absl::OkStatus());
          } else {
            send(left - 1);
          }
        });
    if (!sent.ok()) done.set_value(sent);
  };
  send(kChain);
  std::future<absl::Status> finished = done.get_future();
  ASSERT_EQ(finished.wait_for(std::chrono::seconds(30)), std::future_status::ready)
      << "the chain of syncs stalled";
  EXPECT_TRUE(finished.get().ok());
}

TEST_F(StreamClientTest, AnAnsweringCommandWithoutAReplyInTimeIsDeadlineExceeded) {
  ClientOptions options;
  options.timeout = absl::Milliseconds(20);
  auto client = StreamClient(Connect(options));
  if (client == nullptr) GTEST_SKIP() << "stream transport only";
  // A 1024^3 matmul keeps the CPU backend busy far longer than the 20 ms deadline, so the sync
  // queued behind it cannot answer in time. Empty (not EmptyTensor, which waits for a strides
  // reply under the same short deadline) returns at once; 1024 f32 rows are 4096 bytes, so the
  // layout is contiguous on every backend.
  std::vector<Tensor> m;
  for (int i = 0; i < 3; ++i) {
    auto h = client->Empty(1024 * 1024 * 4);
    ASSERT_TRUE(h.ok()) << h.status();
    m.push_back(Tensor{*h, {1024, 1024}, {1024, 1}, 4});
  }
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(client->Execute(Builtin("matmul", ElemType::kF32), {m[0], m[1]}, {m[2]}).ok());
  }
  const absl::Time start = absl::Now();
  absl::Status synced = client->Sync().get();
  EXPECT_EQ(synced.code(), absl::StatusCode::kDeadlineExceeded) << synced;
  EXPECT_TRUE(absl::StrContains(synced.message(), "within")) << synced;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

}  // namespace
}  // namespace cubed::integration
