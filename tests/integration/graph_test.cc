// Recorded graphs through the C++ SDK and the real daemon (docs/api.md, "Recorded graphs"): over
// the command ring and the gRPC stream; the unary transport refuses them.

#include <cstring>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "tests/integration/kernel_test_util.h"

namespace cubed::integration {
namespace {

using ::testing::HasSubstr;
using GraphTest = DaemonTest;

// Skips (returns true) on the unary transport after checking that it refuses graphs.
bool Unary(Client& client) {
  if (client.transport() != Transport::kUnary) return false;
  EXPECT_EQ(client.BeginGraph({}).code(), absl::StatusCode::kFailedPrecondition);
  return true;
}

TEST_F(GraphTest, ReplaysWithNewBindingsInOrderWithOtherCommands) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  if (Unary(*client)) return;
  std::mt19937_64 rng(3);
  const HostTensor<float> hx = RandomTensor<float>(rng, {1000}, -1, 1);
  const HostTensor<float> hy = RandomTensor<float>(rng, {1000}, -1, 1);
  Tensor x = Upload(*client, hx);
  Tensor y = Upload(*client, hy);
  Tensor t = Output(*client, {1000}, 4);
  Tensor out = Output(*client, {1000}, 4);
  const MemoryUsage before = *client->GetMemoryUsage();
  ASSERT_TRUE(client->BeginGraph({x.handle, out.handle}).ok());
  ASSERT_TRUE(client->Execute(Builtin("mul", ElemType::kF32), {x, y}, {t}).ok());
  ASSERT_TRUE(client->Execute(Builtin("add", ElemType::kF32), {t, x}, {out}).ok());
  absl::StatusOr<Graph> graph = client->EndGraph();
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(graph->steps, 2u);
  for (int round = 0; round < 3; ++round) {
    // A write before the replay is seen by it; the read after it sees its result.
    const HostTensor<float> hx2 = RandomTensor<float>(rng, {1000}, -1, 1);
    Tensor x2 = Upload(*client, hx2);
    Tensor out2 = Output(*client, {1000}, 4);
    ASSERT_TRUE(client->ReplayGraph(*graph, {x2.handle, out2.handle}).ok());
    const std::vector<float> got = Download<float>(*client, out2);
    std::vector<float> want(1000);
    for (size_t i = 0; i < want.size(); ++i) want[i] = hx2.data[i] * hy.data[i] + hx2.data[i];
    ExpectNear(got, want);
  }
  // Thousands of replays, then the result of the last.
  for (int i = 0; i < 2000; ++i)
    ASSERT_TRUE(client->ReplayGraph(*graph, {x.handle, out.handle}).ok());
  ASSERT_TRUE(client->Sync().get().ok());
  std::vector<float> want(1000);
  for (size_t i = 0; i < want.size(); ++i) want[i] = hx.data[i] * hy.data[i] + hx.data[i];
  ExpectNear(Download<float>(*client, out), want);
  ASSERT_TRUE(client->ReleaseGraph(*graph).ok());
  ASSERT_TRUE(client->FlushReleases().ok());  // x2 and out2 of each round.
  ASSERT_TRUE(client->Sync().get().ok());
  EXPECT_EQ(client->GetMemoryUsage()->number_allocs, before.number_allocs);
}

TEST_F(GraphTest, AReleasedBufferLivesWhileItsGraphDoes) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  if (Unary(*client)) return;
  std::mt19937_64 rng(4);
  const HostTensor<float> hy = RandomTensor<float>(rng, {256}, -1, 1);
  Tensor x = Upload(*client, RandomTensor<float>(rng, {256}, -1, 1));
  Tensor out = Output(*client, {256}, 4);
  const uint64_t allocs = client->GetMemoryUsage()->number_allocs;
  absl::StatusOr<Graph> graph;
  {
    Tensor y = Upload(*client, hy);  // Captured: not a parameter.
    ASSERT_TRUE(client->BeginGraph({x.handle, out.handle}).ok());
    ASSERT_TRUE(client->Execute(Builtin("add", ElemType::kF32), {x, y}, {out}).ok());
    graph = client->EndGraph();
    ASSERT_TRUE(graph.ok()) << graph.status();
  }  // y's handle is released here.
  ASSERT_TRUE(client->FlushReleases().ok());
  EXPECT_EQ(client->GetMemoryUsage()->number_allocs, allocs + 1) << "y's memory is kept";
  const HostTensor<float> hx = RandomTensor<float>(rng, {256}, -1, 1);
  Tensor x2 = Upload(*client, hx);  // Must not land in y's memory.
  ASSERT_TRUE(client->ReplayGraph(*graph, {x2.handle, out.handle}).ok());
  std::vector<float> want(256);
  for (size_t i = 0; i < want.size(); ++i) want[i] = hx.data[i] + hy.data[i];
  ExpectNear(Download<float>(*client, out), want);
  ASSERT_TRUE(client->ReleaseGraph(*graph).ok());
  ASSERT_TRUE(client->Sync().get().ok());
  EXPECT_EQ(client->GetMemoryUsage()->number_allocs, allocs + 1) << "x2 only; y freed";
}

TEST_F(GraphTest, ErrorsAreClearAndLeaveNothing) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  if (Unary(*client)) return;
  std::mt19937_64 rng(5);
  Tensor x = Upload(*client, RandomTensor<float>(rng, {64}, -1, 1));
  Tensor small = Upload(*client, RandomTensor<float>(rng, {8}, -1, 1));
  Tensor out = Output(*client, {64}, 4);
  Tensor poisoned = Output(*client, {64}, 4);
  const uint64_t allocs = client->GetMemoryUsage()->number_allocs;
  // A step that fails its checks (shapes that do not broadcast): EndGraph says which.
  ASSERT_TRUE(client->BeginGraph({}).ok());
  EXPECT_EQ(client->BeginGraph({}).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(client->Execute(Builtin("add", ElemType::kF32), {x, small}, {poisoned}).ok());
  absl::StatusOr<Graph> bad = client->EndGraph();
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("step 0 (execute)"));
  EXPECT_EQ(client->EndGraph().status().code(), absl::StatusCode::kFailedPrecondition);
  // The failed execute is also reported by sync, and poisons its output, as any failed execute.
  EXPECT_EQ(client->Sync().get().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(client->BeginGraph({poisoned.handle}).ok());
  EXPECT_THAT(client->EndGraph().status().message(), HasSubstr("does not broadcast"));

  ASSERT_TRUE(client->BeginGraph({x.handle, out.handle}).ok());
  ASSERT_TRUE(client->Execute(Builtin("relu", ElemType::kF32), {x}, {out}).ok());
  absl::StatusOr<Graph> graph = client->EndGraph();
  ASSERT_TRUE(graph.ok()) << graph.status();
  // Wrong bindings: refused by the SDK before anything is sent ...
  EXPECT_EQ(client->ReplayGraph(*graph, {x.handle}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->ReplayGraph(*graph, {x.handle, small.handle}).code(),
            absl::StatusCode::kInvalidArgument);
  // ... and by the daemon, when the SDK is bypassed with a forged graph.
  Graph forged = *graph;
  forged.parameter_sizes = {x.handle.size(), small.handle.size()};
  ASSERT_TRUE(client->ReplayGraph(forged, {x.handle, small.handle}).ok());
  absl::Status s = client->Sync().get();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("bindings[1]"));
  // An unknown graph.
  Graph unknown = *graph;
  unknown.id = 987654321;
  ASSERT_TRUE(client->ReplayGraph(unknown, {x.handle, out.handle}).ok());
  EXPECT_EQ(client->Sync().get().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(client->ReleaseGraph(*graph).ok());
  ASSERT_TRUE(client->ReleaseGraph(*graph).ok());
  EXPECT_EQ(client->Sync().get().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client->GetMemoryUsage()->number_allocs, allocs);
}

TEST_F(GraphTest, GraphsEndWithTheSession) {
  auto observer = Connect();
  ASSERT_NE(observer, nullptr);
  const uint64_t allocs = observer->GetMemoryUsage()->number_allocs;
  {
    auto client = Connect();
    ASSERT_NE(client, nullptr);
    if (Unary(*client)) return;
    std::mt19937_64 rng(6);
    Tensor x = Upload(*client, RandomTensor<float>(rng, {64}, -1, 1));
    Tensor out = Output(*client, {64}, 4);
    ASSERT_TRUE(client->BeginGraph({}).ok());
    ASSERT_TRUE(client->Execute(Builtin("exp", ElemType::kF32), {x}, {out}).ok());
    ASSERT_TRUE(client->EndGraph().ok());
    ASSERT_TRUE(client->BeginGraph({}).ok());  // Still recording when the session ends.
    ASSERT_TRUE(client->Execute(Builtin("exp", ElemType::kF32), {out}, {x}).ok());
  }
  // The daemon closes the session once it sees the stream's end: wait for that, boundedly.
  uint64_t now = 0;
  for (int i = 0; i < 100; ++i) {
    now = observer->GetMemoryUsage()->number_allocs;
    if (now == allocs) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(now, allocs);
}

}  // namespace
}  // namespace cubed::integration
