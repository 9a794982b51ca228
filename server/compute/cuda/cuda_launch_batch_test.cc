// Note [Launch batches] (cuda_launch_batch.h): launches held back between BeginLaunchBatch and
// EndLaunchBatch run as they would one by one: in order, with their own errors, and with
// whatever else reaches the stream after them.

#include "server/compute/cuda/cuda_launch_batch.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/kernel_metadata.h"
#include "gtest/gtest.h"
#include "kernels/builtin.h"
#include "server/compute/cuda/cuda_server.h"
#include "server/compute/cuda/cuda_test_util.h"

namespace cubed {
namespace {

using testing_cuda::kTestOwner;
using testing_cuda::MakeCudaServer;
using testing_cuda::ReadAll;
using testing_cuda::SyncNow;

// `name`(a, b) into out, elementwise over n f32.
Launch Binary(const std::string& name, const Allocation& a, const Allocation& b,
              const Allocation& out, uint64_t n) {
  const TensorLayout vec = TensorLayout::Contiguous({n});
  Launch launch;
  launch.kernel.builtin.name = name;
  launch.kernel.builtin.metadata =
      kernels::ToMetadataWords(*EncodeKernelMetadata({n, n, n}, {vec, vec, vec}));
  launch.buffers = {{a.slice, 0, n * 4}, {b.slice, 0, n * 4}, {out.slice, 0, n * 4}};
  return launch;
}

class CudaLaunchBatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CUBED_SKIP_WITHOUT_CUDA();
    server_ = MakeCudaServer();
    ASSERT_NE(server_, nullptr);
    if (server_->launch_batch() == nullptr) GTEST_SKIP() << "the driver lacks the graph calls";
  }

  Allocation Floats(const std::vector<float>& values) {
    const std::string bytes(reinterpret_cast<const char*>(values.data()), values.size() * 4);
    absl::StatusOr<Allocation> a = server_->Create(
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
        kTestOwner);
    EXPECT_TRUE(a.ok()) << a.status();
    return a.ok() ? *a : Allocation{};
  }

  std::vector<float> Read(const Allocation& a, uint64_t n) {
    absl::StatusOr<std::vector<std::string>> out = ReadAll(*server_, {{a.slice, 0, n * 4}});
    EXPECT_TRUE(out.ok()) << out.status();
    std::vector<float> values(n);
    if (out.ok() && (*out)[0].size() == n * 4) std::memcpy(values.data(), (*out)[0].data(), n * 4);
    return values;
  }

  // The sum of n f32 into one (a split reduction, with the launch workspace, when n is large).
  static Launch Sum(const Allocation& in, const Allocation& out, uint64_t n) {
    Launch launch;
    launch.kernel.builtin.name = "sum";
    launch.kernel.builtin.metadata = kernels::ToMetadataWords(*EncodeKernelMetadata(
        {n, 1}, {TensorLayout::Contiguous({n}), TensorLayout::Contiguous({1})}));
    launch.buffers = {{in.slice, 0, n * 4}, {out.slice, 0, 4}};
    return launch;
  }

  void Execute(const Launch& launch) {
    const absl::Status s = server_->Execute(launch);
    EXPECT_TRUE(s.ok()) << s;
  }

  uint64_t replays() const { return server_->launch_batch()->stats().replays; }
  uint64_t replayed() const { return server_->launch_batch()->stats().launches; }

  std::unique_ptr<CudaServer> server_;
};

// Each launch doubles what the one before it wrote: any other order gives other values.
TEST_F(CudaLaunchBatchTest, HeldBackLaunchesRunInOrderAsReplays) {
  constexpr uint64_t n = 1000;
  Allocation x = Floats(std::vector<float>(n, 1.0f));
  Allocation y = Floats(std::vector<float>(n, 0.0f));
  Execute(Binary("add", x, x, y, n));  // y = 2: launched by itself, as a first launch is.
  EXPECT_EQ(replays(), 0u);
  constexpr int kLaunches = 40;  // One full batch of 32 sent within the run, then 8.
  server_->BeginLaunchBatch();
  for (int i = 0; i < kLaunches; ++i) {
    Execute(i % 2 == 0 ? Binary("add", y, y, x, n) : Binary("add", x, x, y, n));
  }
  server_->EndLaunchBatch();
  EXPECT_EQ(replays(), 2u);
  EXPECT_EQ(replayed(), uint64_t{kLaunches});
  EXPECT_EQ(server_->LaunchBatches().replays, 2u);  // What GetStats and the metrics report.
  EXPECT_EQ(server_->LaunchBatches().launches, uint64_t{kLaunches});
  // y = 2, then x = 4, y = 8, ...: the 40th launch (into y) writes 2^41.
  EXPECT_EQ(Read(y, n), std::vector<float>(n, 2199023255552.0f));
  EXPECT_EQ(Read(x, n), std::vector<float>(n, 1099511627776.0f));

  server_->BeginLaunchBatch();  // A run of one launch goes as a stream launch.
  Execute(Binary("add", y, y, x, n));
  server_->EndLaunchBatch();
  EXPECT_EQ(replays(), 2u);
  EXPECT_EQ(Read(x, n), std::vector<float>(n, 4398046511104.0f));
}

// Runs that reuse a chain while its last replay may still run, with launches of two sizes
// alternating in it and swapping places: every node takes its own arguments each time. (Their
// grids differ too, but the elementwise kernels stride over the grid, so a wrong grid would not
// show in the values: only the arguments are checked here.)
TEST_F(CudaLaunchBatchTest, AChainSetAgainTakesEachLaunchsOwnArguments) {
  constexpr uint64_t small = 1000, large = uint64_t{3} << 20;
  Allocation xs = Floats(std::vector<float>(small, 1.0f));
  Allocation ys = Floats(std::vector<float>(small, 0.0f));
  Allocation xl = Floats(std::vector<float>(large, 0.5f));
  Allocation yl = Floats(std::vector<float>(large, 0.0f));
  Execute(Binary("add", xs, xs, ys, small));  // ys = 2
  Execute(Binary("add", xl, xl, yl, large));  // yl = 1
  for (int round = 0; round < 3; ++round) {   // 3 x 64 launches: six replays of 32 nodes.
    const bool small_first = round != 1;      // Round 1 swaps every node's grid.
    server_->BeginLaunchBatch();
    for (int i = 0; i < 64; ++i) {
      const bool into_x = i % 4 < 2;
      if ((i % 2 == 0) == small_first) {
        Execute(into_x ? Binary("add", ys, ys, xs, small) : Binary("add", xs, xs, ys, small));
      } else {
        Execute(into_x ? Binary("add", yl, yl, xl, large) : Binary("add", xl, xl, yl, large));
      }
    }
    server_->EndLaunchBatch();
  }
  EXPECT_EQ(replays(), 6u);
  // 1 + 96 doublings each: the last launches wrote ys and yl.
  EXPECT_EQ(Read(ys, small), std::vector<float>(small, std::ldexp(1.0f, 97)));
  EXPECT_EQ(Read(yl, large), std::vector<float>(large, std::ldexp(1.0f, 96)));
  EXPECT_EQ(Read(xs, small), std::vector<float>(small, std::ldexp(1.0f, 96)));
  EXPECT_EQ(Read(xl, large), std::vector<float>(large, std::ldexp(1.0f, 95)));
}

// A launch with the workspace, a read and a device mark reach the stream after the launches
// held back before them, which they see.
TEST_F(CudaLaunchBatchTest, WhatCannotBeHeldBackGoesAfterWhatWas) {
  constexpr uint64_t n = uint64_t{1} << 22;  // Split across blocks: the sum uses the workspace.
  Allocation x = Floats(std::vector<float>(n, 1.0f));
  Allocation y = Floats(std::vector<float>(n, 0.0f));
  Allocation total = Floats({0.0f});
  Execute(Binary("add", x, x, y, n));
  Execute(Binary("mul", y, y, x, n));
  Execute(Sum(x, total, n));
  EXPECT_EQ(Read(total, 1)[0], 4.0f * n);
  const uint64_t before = replayed();
  server_->BeginLaunchBatch();
  Execute(Binary("add", x, x, y, n));           // y = 8
  Execute(Binary("mul", y, y, x, n));           // x = 64
  Execute(Sum(x, total, n));                    // Sends the two first: 64 n.
  Execute(Binary("add", x, x, y, n));           // y = 128
  Execute(Binary("add", y, y, x, n));           // x = 256
  const uint64_t mark = server_->DeviceMark();  // Sends those two.
  Execute(Binary("mul", x, x, y, n));           // y = 65536, held back until the end.
  server_->EndLaunchBatch();
  EXPECT_EQ(replayed() - before, 4u);
  EXPECT_EQ(Read(total, 1)[0], 64.0f * n);
  EXPECT_EQ(Read(x, 1)[0], 256.0f);
  EXPECT_EQ(Read(y, 1)[0], 65536.0f);
  if (mark != 0) {
    absl::Notification done;
    server_->TimeMarks({mark}, [&](absl::StatusOr<std::vector<int64_t>> t) {
      EXPECT_TRUE(t.ok()) << t.status();
      done.Notify();
    });
    done.WaitForNotification();
  }

  // A read inside a run (which the loop never does: a guard) sends what was held back first.
  server_->BeginLaunchBatch();
  Execute(Binary("add", y, y, x, n));  // x = 131072
  Execute(Binary("add", x, x, y, n));  // y = 262144
  EXPECT_EQ(Read(y, 1)[0], 262144.0f);
  server_->EndLaunchBatch();
  EXPECT_TRUE(SyncNow(*server_).ok());
}

// Note [Launch batches]: a module unloaded to make room drops the chains (their nodes may name
// its functions); the next run of the same length gets a chain instantiated anew, and the values
// stay right. One module kept: every other kernel's load unloads the last one.
TEST(CudaLaunchBatchEvictionTest, AnUnloadedModuleDropsTheChains) {
  CUBED_SKIP_WITHOUT_CUDA();
  CudaServerOptions options;
  options.memory_limit = uint64_t{1} << 30;
  options.max_modules = 1;
  absl::StatusOr<std::unique_ptr<CudaServer>> made = CudaServer::Create(options);
  ASSERT_TRUE(made.ok()) << made.status();
  CudaServer& server = **made;
  if (server.launch_batch() == nullptr) GTEST_SKIP() << "the driver lacks the graph calls";
  constexpr uint64_t n = 512;
  auto floats = [&](float v) {
    const std::vector<float> values(n, v);
    absl::StatusOr<Allocation> a = server.Create(
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(values.data()), n * 4), kTestOwner);
    EXPECT_TRUE(a.ok()) << a.status();
    return a.ok() ? *a : Allocation{};
  };
  Allocation x = floats(1.0f), y = floats(0.0f);
  auto execute = [&](const Launch& launch) {
    const absl::Status s = server.Execute(launch);
    EXPECT_TRUE(s.ok()) << s;
  };
  auto run_of_adds = [&] {  // Eight adds: x and y doubled four times each.
    server.BeginLaunchBatch();
    for (int i = 0; i < 8; ++i) {
      execute(i % 2 == 0 ? Binary("add", x, x, y, n) : Binary("add", y, y, x, n));
    }
    server.EndLaunchBatch();
  };
  execute(Binary("add", x, x, y, n));  // y = 2: add's module, launched once.
  run_of_adds();                       // x = 2^8: a chain of 8 made.
  EXPECT_EQ(server.launch_batch()->chains_made(), 1u);
  execute(Binary("mul", x, x, y, n));  // y = 2^16: add's module unloaded.
  execute(Binary("add", y, y, x, n));  // x = 2^17: mul's unloaded.
  run_of_adds();                       // x = 2^25: the chain of 8 anew.
  EXPECT_EQ(server.launch_batch()->chains_made(), 2u);
  EXPECT_EQ(server.launch_batch()->stats().replays, 2u);
  absl::StatusOr<std::vector<std::string>> out = ReadAll(server, {{x.slice, 0, n * 4}});
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<float> values(n);
  std::memcpy(values.data(), (*out)[0].data(), n * 4);
  EXPECT_EQ(values, std::vector<float>(n, std::ldexp(1.0f, 25)));
}

// A launch refused in a run is refused by itself; the launches around it run, in order.
TEST_F(CudaLaunchBatchTest, ALaunchRefusedInARunFailsAloneAndTheOthersRun) {
  constexpr uint64_t n = 256;
  Allocation x = Floats(std::vector<float>(n, 1.0f));
  Allocation y = Floats(std::vector<float>(n, 0.0f));
  Allocation z = Floats(std::vector<float>(n, 0.0f));
  Execute(Binary("add", x, x, y, n));  // y = 2
  Launch wrong = Binary("add", x, x, y, n);
  wrong.buffers[2].size = 4;  // Smaller than its metadata says.
  server_->BeginLaunchBatch();
  Execute(Binary("add", y, y, x, n));  // x = 4
  const absl::Status refused = server_->Execute(wrong);
  Execute(Binary("add", x, x, y, n));  // y = 8
  Execute(Binary("sub", y, x, z, n));  // z = 4: a first sub goes by itself, after those two.
  Execute(Binary("add", z, y, x, n));  // x = 12, held back
  server_->EndLaunchBatch();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_EQ(Read(y, n), std::vector<float>(n, 8.0f));
  EXPECT_EQ(Read(z, n), std::vector<float>(n, 4.0f));
  EXPECT_EQ(Read(x, n), std::vector<float>(n, 12.0f));
}

}  // namespace
}  // namespace cubed
