// Client::StartTrace / EndTrace (docs/operations.md, "Traces"): the daemon's record of the
// session's commands through the C++ SDK, and its Chrome trace-event JSON.

#include <cstring>

#include "client/trace_json.h"
#include "gmock/gmock.h"
#include "tests/integration/kernel_test_util.h"

namespace cubed::integration {
namespace {

using ::testing::HasSubstr;
using TraceTest = DaemonTest;

TEST_F(TraceTest, TheTraceHoldsTheCommandsBetweenStartAndEnd) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::mt19937_64 rng(7);
  Tensor before = Upload(*client, RandomTensor<float>(rng, {64}, -1, 1));  // Not traced.
  ASSERT_TRUE(client->StartTrace().ok());
  Tensor x = Upload(*client, RandomTensor<float>(rng, {64}, -1, 1));
  Tensor y = Output(*client, {64}, 4);
  ASSERT_TRUE(client->Execute(Builtin("add", ElemType::kF32), {before, x}, {y}).ok());
  (void)Download<float>(*client, y);
  absl::StatusOr<Client::TraceResult> r = client->EndTrace();
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<std::string> kernels;
  int creates = 0;
  for (const v1::TraceEvent& e : r->trace.events()) {
    EXPECT_GE(e.duration_ns(), 0);
    if (e.category() == "kernel") kernels.push_back(e.name());
    if (e.name() == "create" && e.bytes() == 256) ++creates;
  }
  EXPECT_EQ(kernels, std::vector<std::string>{"add"});
  // Stream commands carry their wait between arrival and the loop; unary calls none.
  for (const v1::TraceEvent& e : r->trace.events()) {
    if (client->transport() == Transport::kStream) {
      EXPECT_GT(e.queued_ns(), 0) << e.name();
    } else {
      EXPECT_EQ(e.queued_ns(), 0) << e.name();
    }
  }
  EXPECT_EQ(creates, 1);  // x only.
  EXPECT_EQ(r->trace.dropped(), 0u);
  const std::string json = ChromeTraceJson(r->trace, client->session(), 0);
  EXPECT_THAT(json, HasSubstr("\"name\":\"add\",\"cat\":\"kernel\",\"ph\":\"X\""));
  EXPECT_THAT(json, HasSubstr("\"name\":\"thread_name\""));
  // No profile open now: a second EndTrace is refused.
  EXPECT_EQ(client->EndTrace().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(client->StartTrace(1000001).code(), absl::StatusCode::kInvalidArgument);
}

TEST(TraceJsonTest, QuotesNamesAndKeepsNanoseconds) {
  v1::Trace trace;
  trace.set_device(2);
  v1::TraceEvent* e = trace.add_events();
  e->set_name("a\"b\\c\n");
  e->set_category("kernel");
  e->set_start_unix_ns(1000000);
  e->set_duration_ns(1500);
  e->set_device_start_unix_ns(1000250);
  e->set_device_duration_ns(7);
  const std::string json = ChromeTraceJson(trace, 5, 42);
  EXPECT_THAT(json,
              HasSubstr("\"name\":\"a\\\"b\\\\c\\n\",\"cat\":\"kernel\",\"ph\":\"X\",\"ts\":0.000,"
                        "\"dur\":1.500,\"pid\":2,\"tid\":5"));
  EXPECT_THAT(json,
              HasSubstr("\"cat\":\"device\",\"ph\":\"X\",\"ts\":0.250,\"dur\":0.007,\"pid\":2,"
                        "\"tid\":6"));
  EXPECT_THAT(json, HasSubstr("\"device_time_ns\":42}}"));
  EXPECT_EQ(JsonQuote(std::string("\x01", 1)), "\"\\u0001\"");
}

}  // namespace
}  // namespace cubed::integration
