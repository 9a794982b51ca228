// Recorded graphs on a Device with the CPU backend (Note [Recorded graphs], graph.h).

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/kernel_metadata.h"
#include "server/channel/device.h"
#include "server/compute/cpu/cpu_server.h"

namespace cubed {
namespace {

constexpr uint64_t kN = 4;  // Elements of every tensor below (f32).

class GraphTest : public ::testing::Test {
 protected:
  GraphTest() {
    CpuServerOptions cpu;
    cpu.memory_limit = 64 << 20;
    DeviceOptions options;
    options.default_lease = absl::Seconds(10);
    device_ = std::make_unique<Device>(0, std::make_unique<CpuServer>(cpu), options);
    session_ = device_->OpenSession(0, now_)->session;
  }

  HandleId Floats(std::vector<float> values) {
    std::string bytes(values.size() * 4, '\0');
    std::memcpy(bytes.data(), values.data(), bytes.size());
    absl::StatusOr<NewHandle> h = device_->Create(
        session_, absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
        now_);
    EXPECT_TRUE(h.ok()) << h.status();
    return h->handle;
  }

  std::vector<float> Values(HandleId h) {
    std::vector<std::string> out;
    absl::Status status;
    device_->Read(session_, {{h, 0, 0}}, &out, now_, [&](absl::Status s) { status = s; });
    EXPECT_TRUE(status.ok()) << status;
    if (!status.ok()) return {};
    std::vector<float> values(out[0].size() / 4);
    std::memcpy(values.data(), out[0].data(), out[0].size());
    return values;
  }

  // out = a + b (builtin add, f32, kN elements each).
  ExecuteCommand Add(HandleId a, HandleId b, HandleId out) {
    ExecuteCommand c;
    c.kernel.builtin.name = "add";
    const TensorLayout layout = TensorLayout::Contiguous({kN});
    c.kernel.builtin.metadata =
        kernels::ToMetadataWords(*EncodeKernelMetadata({kN, kN, kN}, {layout, layout, layout}));
    c.count[0] = 1;
    c.buffers = {{a, 0, 0}, {b, 0, 0}, {out, 0, 0}};
    return c;
  }

  absl::Status Record(HandleId a, HandleId b, HandleId out) {
    ExecuteCommand c = Add(a, b, out);
    const HandleId outputs[] = {out};
    return device_->RecordExecute(session_, c, outputs, now_);
  }

  absl::Status Replay(GraphId graph, std::vector<HandleId> bindings,
                      HandleList* written = nullptr) {
    HandleList ignored;
    return device_->ReplayGraph(session_, graph, bindings, now_,
                                written != nullptr ? written : &ignored);
  }

  absl::Time now_ = absl::FromUnixSeconds(1000);
  std::unique_ptr<Device> device_;
  SessionId session_;
};

TEST_F(GraphTest, RecordsWithoutRunningAndReplaysWithNewBindings) {
  const HandleId x = Floats({1, 2, 3, 4});
  const HandleId y = Floats({10, 20, 30, 40});
  const HandleId t = Floats({0, 0, 0, 0});
  const HandleId out = Floats({0, 0, 0, 0});
  device_->BeginGraph(session_, GraphId(7), {x, out}, absl::OkStatus(), now_);
  EXPECT_TRUE(device_->Recording(session_));
  ASSERT_TRUE(Record(x, y, t).ok());    // t = x + y
  ASSERT_TRUE(Record(t, x, out).ok());  // out = t + x
  EXPECT_EQ(Values(out), std::vector<float>({0, 0, 0, 0})) << "recording runs nothing";
  absl::StatusOr<uint64_t> steps = device_->EndGraph(session_, now_);
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_EQ(*steps, 2u);
  EXPECT_FALSE(device_->Recording(session_));

  HandleList written;
  ASSERT_TRUE(Replay(GraphId(7), {x, out}, &written).ok());
  EXPECT_EQ(Values(out), std::vector<float>({12, 24, 36, 48}));
  EXPECT_EQ(written, HandleList({out}));
  const HandleId x2 = Floats({100, 200, 300, 400});
  const HandleId out2 = Floats({0, 0, 0, 0});
  ASSERT_TRUE(Replay(GraphId(7), {x2, out2}).ok());
  EXPECT_EQ(Values(out2), std::vector<float>({210, 420, 630, 840}));
  EXPECT_EQ(Values(out), std::vector<float>({12, 24, 36, 48})) << "the old binding untouched";
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(Replay(GraphId(7), {out2, out}).ok());
}

TEST_F(GraphTest, HeldMemoryOutlivesItsHandleAndCountsUntilTheGraphGoes) {
  const MemoryUsage before = device_->Usage();
  const HandleId x = Floats({1, 2, 3, 4});
  const HandleId y = Floats({5, 5, 5, 5});
  const HandleId out = Floats({0, 0, 0, 0});
  device_->BeginGraph(session_, GraphId(1), {out}, absl::OkStatus(), now_);
  ASSERT_TRUE(Record(x, y, out).ok());
  ASSERT_TRUE(device_->EndGraph(session_, now_).ok());
  // x and y are the graph's now: their ids go, their memory stays (still accounted).
  ASSERT_TRUE(device_->Release(session_, {x, y}, now_).ok());
  EXPECT_EQ(device_->Usage().number_allocs, before.number_allocs + 3);
  EXPECT_EQ(device_->Release(session_, {x}, now_).code(), absl::StatusCode::kNotFound);
  const HandleId z = Floats({9, 9, 9, 9});  // May not reuse x's memory.
  ASSERT_TRUE(Replay(GraphId(1), {out}).ok());
  EXPECT_EQ(Values(out), std::vector<float>({6, 7, 8, 9}));
  EXPECT_EQ(Values(z), std::vector<float>({9, 9, 9, 9}));
  ASSERT_TRUE(device_->ReleaseGraph(session_, GraphId(1), now_).ok());
  EXPECT_EQ(device_->Usage().number_allocs, before.number_allocs + 2) << "x and y freed";
  EXPECT_EQ(device_->ReleaseGraph(session_, GraphId(1), now_).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Replay(GraphId(1), {out}).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(device_->Release(session_, {out, z}, now_).ok());
  EXPECT_EQ(device_->Usage().number_allocs, before.number_allocs);
  EXPECT_EQ(device_->Usage().bytes_in_use, before.bytes_in_use);
}

TEST_F(GraphTest, ClosingTheSessionFreesGraphsAndWhatTheyHeld) {
  const MemoryUsage before = device_->Usage();
  const HandleId x = Floats({1, 2, 3, 4});
  const HandleId out = Floats({0, 0, 0, 0});
  device_->BeginGraph(session_, GraphId(1), {}, absl::OkStatus(), now_);
  ASSERT_TRUE(Record(x, x, out).ok());
  ASSERT_TRUE(device_->EndGraph(session_, now_).ok());
  device_->BeginGraph(session_, GraphId(2), {}, absl::OkStatus(), now_);  // Left recording.
  ASSERT_TRUE(Record(out, x, out).ok());
  ASSERT_TRUE(device_->Release(session_, {x, out}, now_).ok());
  EXPECT_EQ(device_->Usage().number_allocs, before.number_allocs + 2);
  ASSERT_TRUE(device_->CloseSession(session_).ok());
  EXPECT_EQ(device_->Usage().number_allocs, before.number_allocs);
  EXPECT_EQ(device_->Usage().bytes_in_use, before.bytes_in_use);
}

TEST_F(GraphTest, BadRecordingsFailAtEndAndKeepNothing) {
  const MemoryUsage before = device_->Usage();
  const HandleId x = Floats({1, 2, 3, 4});
  const HandleId small = Floats({1});
  // Bad begins: each recording fails, end_graph says why, the id stays free.
  struct Case {
    uint64_t graph;
    std::vector<HandleId> parameters;
    absl::StatusCode code;
  };
  const Case cases[] = {
      {0, {}, absl::StatusCode::kInvalidArgument},
      {1, {HandleId(12345)}, absl::StatusCode::kNotFound},
      {1, {x, x}, absl::StatusCode::kInvalidArgument},
  };
  for (const Case& c : cases) {
    device_->BeginGraph(session_, GraphId(c.graph), c.parameters, absl::OkStatus(), now_);
    EXPECT_TRUE(device_->Recording(session_));
    EXPECT_TRUE(Record(x, x, x).ok()) << "nothing more is recorded";
    absl::StatusOr<uint64_t> end = device_->EndGraph(session_, now_);
    EXPECT_EQ(end.status().code(), c.code) << end.status();
  }
  // A step that fails its checks fails the recording, with the step's error.
  device_->BeginGraph(session_, GraphId(1), {}, absl::OkStatus(), now_);
  absl::Status step = Record(x, small, x);
  EXPECT_EQ(step.code(), absl::StatusCode::kInvalidArgument) << step;
  absl::StatusOr<uint64_t> end = device_->EndGraph(session_, now_);
  EXPECT_EQ(end.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(end.status().message().find("graph 1 step 0"), absl::string_view::npos) << end.status();
  // Nesting fails the outer recording.
  device_->BeginGraph(session_, GraphId(1), {}, absl::OkStatus(), now_);
  ASSERT_TRUE(Record(x, x, x).ok());
  device_->BeginGraph(session_, GraphId(2), {}, absl::OkStatus(), now_);
  EXPECT_EQ(device_->EndGraph(session_, now_).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(device_->EndGraph(session_, now_).status().code(),
            absl::StatusCode::kFailedPrecondition)
      << "no recording left";
  // The conversion's error starts a failed recording.
  device_->BeginGraph(session_, GraphId(3), {}, absl::InvalidArgumentError("bad"), now_);
  EXPECT_EQ(device_->EndGraph(session_, now_).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Replay(GraphId(1), {}).code(), absl::StatusCode::kNotFound) << "no graph was kept";
  ASSERT_TRUE(device_->Release(session_, {x, small}, now_).ok());
  EXPECT_EQ(device_->Usage().number_allocs, before.number_allocs);
}

TEST_F(GraphTest, ReplayChecksItsBindings) {
  const HandleId x = Floats({1, 2, 3, 4});
  const HandleId out = Floats({0, 0, 0, 0});
  const HandleId small = Floats({1, 2});
  device_->BeginGraph(session_, GraphId(5), {x, out}, absl::OkStatus(), now_);
  ASSERT_TRUE(Record(x, x, out).ok());
  ASSERT_TRUE(device_->EndGraph(session_, now_).ok());
  EXPECT_EQ(Replay(GraphId(5), {x}).code(), absl::StatusCode::kInvalidArgument);
  absl::Status wrong_size = Replay(GraphId(5), {x, small});
  EXPECT_EQ(wrong_size.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong_size.message().find("bindings[1]"), absl::string_view::npos) << wrong_size;
  EXPECT_EQ(Replay(GraphId(5), {x, HandleId(99)}).code(), absl::StatusCode::kNotFound);
  // A poisoned binding fails with its poison; the graph's outputs are named for poisoning.
  device_->PoisonHandles(session_, {x}, absl::DataLossError("x went bad"));
  HandleList written;
  EXPECT_EQ(Replay(GraphId(5), {x, out}, &written).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(written, HandleList({out}));
  // No replay while recording, and no graph id twice.
  device_->BeginGraph(session_, GraphId(6), {}, absl::OkStatus(), now_);
  EXPECT_EQ(Replay(GraphId(5), {out, out}).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(device_->EndGraph(session_, now_).ok());
  device_->BeginGraph(session_, GraphId(5), {}, absl::OkStatus(), now_);
  EXPECT_EQ(device_->EndGraph(session_, now_).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace cubed
