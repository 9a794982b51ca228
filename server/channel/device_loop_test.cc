// DeviceLoop: Note [Loop task exceptions]: a task that throws fails its own request and the loop
// keeps serving.

#include "server/channel/device_loop.h"

#include <memory>
#include <new>
#include <stdexcept>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/compute/cpu/cpu_server.h"

namespace cubed {
namespace {

std::unique_ptr<Device> CpuDevice() {
  CpuServerOptions options;
  options.memory_limit = uint64_t{16} << 20;
  return std::make_unique<Device>(0, std::make_unique<CpuServer>(options), DeviceOptions());
}

TEST(DeviceLoopTest, ThrowingTaskFailsItsRequestAndTheLoopGoesOn) {
  DeviceLoop loop(CpuDevice());
  absl::Status length_error, out_of_memory;
  absl::Notification both;
  ASSERT_TRUE(loop.Post([](Device&) { throw std::length_error("basic_string::_M_create"); },
                        [&](absl::Status s) { length_error = s; }));
  ASSERT_TRUE(loop.Post([](Device&) { throw std::bad_alloc(); },
                        [&](absl::Status s) {
                          out_of_memory = s;
                          both.Notify();
                        }));
  ASSERT_TRUE(both.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(length_error.code(), absl::StatusCode::kInternal);
  EXPECT_NE(length_error.message().find("basic_string::_M_create"), absl::string_view::npos);
  EXPECT_EQ(out_of_memory.code(), absl::StatusCode::kResourceExhausted);

  // The loop still runs tasks, on the same Device, with nothing allocated by the failures.
  absl::Notification served;
  uint64_t allocs = ~uint64_t{0};
  ASSERT_TRUE(loop.Post([&](Device& d) {
    allocs = d.Usage().number_allocs;
    served.Notify();
  }));
  ASSERT_TRUE(served.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(allocs, 0u);
  EXPECT_EQ(loop.exceptions(), 2u);
}

TEST(DeviceLoopTest, ThrowingTaskWithoutHandlerIsOnlyLogged) {
  DeviceLoop loop(CpuDevice());
  ASSERT_TRUE(loop.Post([](Device&) { throw 42; }));
  absl::Notification served;
  ASSERT_TRUE(loop.Post([&](Device&) { served.Notify(); }));
  ASSERT_TRUE(served.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(loop.exceptions(), 1u);
}

// Note [Loop spin]: a spinning loop runs tasks posted while it spins and after it went to sleep,
// in order, and an idle one stops at once.
TEST(DeviceLoopTest, ASpinningLoopRunsEveryTaskInOrderAndStops) {
  DeviceLoop loop(CpuDevice(), absl::Milliseconds(2));
  std::vector<int> order;  // Touched only on the loop, read after `done`.
  absl::Notification done;
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(loop.Post([&order, i](Device&) { order.push_back(i); }));
    if (i % 100 == 0) absl::SleepFor(absl::Milliseconds(i % 200 == 0 ? 1 : 5));  // Both sides.
  }
  ASSERT_TRUE(loop.Post([&](Device&) { done.Notify(); }));
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_EQ(order.size(), 1000u);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(order[i], i);
  absl::SleepFor(absl::Milliseconds(20));  // Asleep now.
  const absl::Time start = absl::Now();
  loop.Stop();
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(500));
}

}  // namespace
}  // namespace cubed
