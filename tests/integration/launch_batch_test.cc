// Pipelined executes on a session stream, each reading what the one before it wrote, as a
// client sends them: on the CUDA backend their launches go as graph replays (Note [Launch
// batches], server/compute/cuda/cuda_launch_batch.h), and must still run in order, see each
// other, fail alone, and be reported by GetStats; on the CPU backend the same sequence is the
// ordering test it always was.

#include <grpcpp/grpcpp.h>

#include <cmath>
#include <string>
#include <vector>

#include "cubed/v1/compute.grpc.pb.h"
#include "tests/integration/integration_test.h"

namespace cubed::integration {
namespace {

class LaunchBatchTest : public DaemonTest {
 protected:
  static v1::DeviceStats DeviceStats() {
    auto channel = grpc::CreateChannel(daemon().unix_address(), grpc::InsecureChannelCredentials());
    auto stub = v1::Compute::NewStub(channel);
    grpc::ClientContext context;
    v1::GetStatsResponse response;
    EXPECT_TRUE(stub->GetStats(&context, v1::GetStatsRequest(), &response).ok());
    return response.devices_size() > 0 ? response.devices(0) : v1::DeviceStats();
  }

  static Tensor Floats(Client& client, const std::vector<float>& values) {
    absl::StatusOr<Tensor> t = client.CreateTensor(ToBytes(values), {values.size()}, 4);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *t : Tensor();
  }
};

// Two pairs of buffers of different sizes, each launch doubling what the last launch into its
// pair wrote, 200 launches in a row (any launch lost, repeated or reordered within a pair shows
// in the values): runs of 32 replayed while the last replay of the same chain may still run;
// then a refused launch amid them.
TEST_F(LaunchBatchTest, PipelinedExecutesRunInOrderAndFailAlone) {
  std::unique_ptr<Client> client = Connect();
  ASSERT_NE(client, nullptr);
  const uint64_t small = 1000, large = uint64_t{3} << 20;
  Tensor xs = Floats(*client, std::vector<float>(small, 1.0f));
  Tensor ys = Floats(*client, std::vector<float>(small, 0.0f));
  Tensor xl = Floats(*client, std::vector<float>(large, 0.5f));
  Tensor yl = Floats(*client, std::vector<float>(large, 0.0f));
  const BuiltinKernel add = Builtin("add", ElemType::kF32);
  const v1::DeviceStats before = DeviceStats();
  for (int i = 0; i < 200; ++i) {
    const bool into_y = i % 4 < 2;
    const bool on_small = i % 2 == 0;
    const Tensor& from = on_small ? (into_y ? xs : ys) : (into_y ? xl : yl);
    const Tensor& to = on_small ? (into_y ? ys : xs) : (into_y ? yl : xl);
    ASSERT_TRUE(client->Execute(add, {from, from}, {to}).ok());
  }
  // 100 doublings each: 2^100 and 2^99, exact in f32. The last launches wrote xs and xl.
  EXPECT_EQ(FromBytes<float>(ReadTensorOrDie(*client, xs)),
            std::vector<float>(small, std::ldexp(1.0f, 100)));
  EXPECT_EQ(FromBytes<float>(ReadTensorOrDie(*client, xl)),
            std::vector<float>(large, std::ldexp(1.0f, 99)));
  EXPECT_EQ(FromBytes<float>(ReadTensorOrDie(*client, ys)),
            std::vector<float>(small, std::ldexp(1.0f, 99)));

  // A launch whose output is too small for its input is refused; the ones around it run.
  Tensor tiny = Floats(*client, {0.0f});
  ASSERT_TRUE(client->Execute(add, {xs, xs}, {ys}).ok());  // ys = 2^101
  const absl::Status refused_when_sent = client->Execute(add, {xs, xs}, {tiny});
  ASSERT_TRUE(client->Execute(add, {ys, ys}, {xs}).ok());  // xs = 2^102
  const absl::Status synced = client->Sync().get();  // On the stream: the refusal, reported late.
  const absl::Status refused = refused_when_sent.ok() ? synced : refused_when_sent;
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_EQ(FromBytes<float>(ReadTensorOrDie(*client, xs)),
            std::vector<float>(small, std::ldexp(1.0f, 102)));

  const v1::DeviceStats after = DeviceStats();
  if (testing::TestBackend() == "cuda" && client->transport() != Transport::kUnary) {
    // Some of the 200 came in runs (how many depends on how the client batched them).
    EXPECT_GT(after.launch_batches(), before.launch_batches());
    EXPECT_GT(after.batched_launches(), before.batched_launches());
  } else if (testing::TestBackend() == "cpu") {
    EXPECT_EQ(after.launch_batches(), 0u);  // The CPU backend batches nothing.
  }
}

}  // namespace
}  // namespace cubed::integration
