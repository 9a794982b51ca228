#include "server/channel/device.h"

#include <gtest/gtest.h>

#include "server/compute/cpu/cpu_server.h"

namespace cubed {
namespace {

class DeviceTest : public ::testing::Test {
 protected:
  DeviceTest() {
    CpuServerOptions cpu;
    cpu.memory_limit = 64 << 20;
    DeviceOptions options;
    options.default_lease = absl::Seconds(10);
    device_ = std::make_unique<Device>(0, std::make_unique<CpuServer>(cpu), options);
    session_ = device_->OpenSession(0, now_)->session;
  }

  absl::Span<const uint8_t> Bytes(const std::string& s) {
    return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }

  std::vector<std::string> Read(std::vector<BindingRef> refs, absl::Status* status) {
    std::vector<std::string> out;
    device_->Read(session_, refs, &out, now_, [status](absl::Status s) { *status = s; });
    return out;
  }

  absl::Time now_ = absl::FromUnixSeconds(1000);
  std::unique_ptr<Device> device_;
  SessionId session_;
};

TEST_F(DeviceTest, CreateReadSubviewRelease) {
  const MemoryUsage before = device_->Usage();
  absl::StatusOr<NewHandle> h = device_->Create(session_, Bytes("hello world"), now_);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->size, 11u);
  absl::Status status;
  std::vector<std::string> out = Read({{h->handle, 0, 0}, {h->handle, 6, 1}}, &status);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(out[0], "hello world");
  EXPECT_EQ(out[1], "worl");
  EXPECT_EQ(device_->Usage().bytes_in_use, before.bytes_in_use + 11);
  ASSERT_TRUE(device_->Release(session_, {h->handle}, now_).ok());
  EXPECT_EQ(device_->Usage().bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(device_->Usage().number_allocs, before.number_allocs);
}

TEST_F(DeviceTest, HandleIdsAreNotSequential) {
  const uint64_t a = device_->Empty(session_, 8, now_)->handle.value();
  const uint64_t b = device_->Empty(session_, 8, now_)->handle.value();
  EXPECT_NE(a, 0u);
  EXPECT_GT(a > b ? a - b : b - a, 1000u);
}

TEST_F(DeviceTest, AnotherSessionsHandleIsNotFound) {
  SessionId other = device_->OpenSession(0, now_)->session;
  NewHandle h = *device_->Create(session_, Bytes("abc"), now_);
  std::vector<std::string> out;
  absl::Status status;
  device_->Read(other, {{h.handle, 0, 0}}, &out, now_, [&](absl::Status s) { status = s; });
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_EQ(device_->Release(other, {h.handle}, now_).code(), absl::StatusCode::kNotFound);
}

// docs/security.md, "Memory isolation": each session is its own memory owner, so memory that
// another session freed is zeroed and memory a session freed itself is not.
TEST_F(DeviceTest, FreedMemoryIsZeroedForAnotherSessionOnly) {
  const std::string secret(100, 's');
  NewHandle h = *device_->Create(session_, Bytes(secret), now_);
  ASSERT_TRUE(device_->Release(session_, {h.handle}, now_).ok());
  const HandleId own = device_->Empty(session_, 100, now_)->handle;
  absl::Status status;
  EXPECT_EQ(Read({{own, 0, 0}}, &status)[0], secret) << "its own bytes: not zeroed";
  ASSERT_TRUE(device_->Release(session_, {own}, now_).ok());
  const SessionId other = device_->OpenSession(0, now_)->session;
  const HandleId e = device_->Empty(other, 100, now_)->handle;
  std::vector<std::string> out;
  device_->Read(other, {{e, 0, 0}}, &out, now_, [&](absl::Status s) { status = s; });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(out[0], std::string(100, '\0')) << "another session's bytes";
}

TEST_F(DeviceTest, OffsetsAreChecked) {
  NewHandle h = *device_->Create(session_, Bytes("0123456789"), now_);
  absl::Status status;
  Read({{h.handle, 11, 0}}, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("offset_start 11"), absl::string_view::npos) << status;
  Read({{h.handle, 4, 7}}, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("offset_end 7"), absl::string_view::npos) << status;
  std::vector<std::string> out = Read({{h.handle, 4, 6}}, &status);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(out[0], "");
}

TEST_F(DeviceTest, ReleaseChecksEveryHandleFirst) {
  NewHandle h = *device_->Create(session_, Bytes("abc"), now_);
  const MemoryUsage before = device_->Usage();
  absl::Status s = device_->Release(session_, {h.handle, HandleId(12345)}, now_);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(device_->Usage(), before);
  s = device_->Release(session_, {h.handle, h.handle}, now_);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(device_->Usage(), before);
}

TEST_F(DeviceTest, OverTheLimitChangesNothing) {
  const MemoryUsage before = device_->Usage();
  absl::StatusOr<NewHandle> h = device_->Empty(session_, 65 << 20, now_);
  EXPECT_FALSE(h.ok());
  EXPECT_EQ(device_->Usage(), before);
  EXPECT_EQ(device_->CloseSession(session_).value(), 0u);
}

TEST_F(DeviceTest, LeaseExpiryFreesEverything) {
  const MemoryUsage before = device_->Usage();
  ASSERT_TRUE(device_->Empty(session_, 1 << 20, now_).ok());
  EXPECT_EQ(device_->ExpireSessions(now_ + absl::Seconds(9)), 0u);
  EXPECT_EQ(device_->ExpireSessions(now_ + absl::Seconds(11)), 1u);
  EXPECT_EQ(device_->Usage().bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(device_->Usage().number_allocs, before.number_allocs);
  absl::StatusOr<NewHandle> h = device_->Empty(session_, 8, now_ + absl::Seconds(12));
  EXPECT_EQ(h.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(DeviceTest, CallsRenewTheLease) {
  ASSERT_TRUE(device_->Empty(session_, 8, now_ + absl::Seconds(8)).ok());
  EXPECT_EQ(device_->ExpireSessions(now_ + absl::Seconds(11)), 0u);
}

TEST_F(DeviceTest, ProfileMisuseIsFailedPrecondition) {
  absl::StatusOr<absl::Duration> result;
  device_->EndProfile(session_, now_, [&](absl::StatusOr<absl::Duration> d) { result = d; });
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(device_->StartProfile(session_, now_).ok());
  EXPECT_EQ(device_->StartProfile(session_, now_).code(), absl::StatusCode::kFailedPrecondition);
  device_->EndProfile(session_, now_, [&](absl::StatusOr<absl::Duration> d) { result = d; });
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_GE(*result, absl::ZeroDuration());
}

TEST_F(DeviceTest, ATracedProfileRecordsEachCommandBounded) {
  EXPECT_EQ(device_->StartProfile(session_, now_, Device::kMaxTraceEvents + 1).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(device_->StartProfile(session_, now_, 4).ok());
  absl::StatusOr<NewHandle> h = device_->Create(session_, Bytes("hello world"), now_);
  ASSERT_TRUE(h.ok()) << h.status();
  absl::Status status;
  Read({{h->handle, 0, 0}}, &status);
  ASSERT_TRUE(status.ok()) << status;
  ExecuteCommand fill;  // An invalid launch is traced too: it ran on the loop.
  fill.kernel.builtin.name = "fill";
  fill.buffers = {{h->handle, 0, 0}};
  EXPECT_FALSE(device_->Execute(session_, fill, now_).ok());
  ASSERT_TRUE(device_->Flush(session_, now_).ok());
  ASSERT_TRUE(device_->Release(session_, {h->handle}, now_).ok());  // The fifth: dropped.
  std::unique_ptr<TraceRecorder> trace;
  absl::StatusOr<absl::Duration> elapsed;
  device_->EndProfile(
      session_, now_, [&](absl::StatusOr<absl::Duration> d) { elapsed = d; }, &trace);
  ASSERT_TRUE(elapsed.ok()) << elapsed.status();
  ASSERT_NE(trace, nullptr);
  ASSERT_EQ(trace->events().size(), 4u);
  EXPECT_EQ(trace->dropped(), 1u);
  const std::vector<TraceEvent>& e = trace->events();
  EXPECT_EQ(e[0].name, "create");
  EXPECT_EQ(e[0].category, "memory");
  EXPECT_EQ(e[0].bytes, 11u);
  EXPECT_EQ(e[1].name, "read");
  EXPECT_EQ(e[1].category, "transfer");
  EXPECT_EQ(e[1].bytes, 11u);
  EXPECT_EQ(e[2].name, "fill");
  EXPECT_EQ(e[2].category, "kernel");
  EXPECT_EQ(e[3].name, "flush");
  for (size_t i = 0; i < e.size(); ++i) {
    EXPECT_GE(e[i].duration_ns, 0);
    if (i > 0) {
      EXPECT_GE(e[i].start_unix_ns, e[i - 1].start_unix_ns + e[i - 1].duration_ns);
    }
  }
  // An untraced profile records nothing.
  ASSERT_TRUE(device_->StartProfile(session_, now_).ok());
  ASSERT_TRUE(device_->Flush(session_, now_).ok());
  device_->EndProfile(
      session_, now_, [&](absl::StatusOr<absl::Duration> d) { elapsed = d; }, &trace);
  EXPECT_EQ(trace, nullptr);
}

TEST(TraceRecorderTest, DeviceTimesLandOnTheMarkedEventsOnly) {
  TraceRecorder trace(3);
  trace.set_base(7, 1000000);
  TraceEvent kernel{"add", "kernel", 1000100, 50, 0};
  kernel.mark_begin = 8;
  kernel.mark_end = 9;
  trace.Record(kernel);
  trace.Record({"create", "memory", 1000200, 10, 64});  // No marks.
  TraceEvent second = kernel;
  second.mark_begin = 10;
  second.mark_end = 11;
  trace.Record(second);
  EXPECT_TRUE(trace.full());
  EXPECT_EQ(trace.Marks(), (std::vector<uint64_t>{7, 8, 9, 10, 11}));
  trace.SetDeviceTimes({0, 500, 2500, 3000, 2900});  // The last ended "before" it began: 0.
  EXPECT_EQ(trace.events()[0].device_start_unix_ns, 1000500);
  EXPECT_EQ(trace.events()[0].device_duration_ns, 2000);
  EXPECT_EQ(trace.events()[1].device_start_unix_ns, 0);
  EXPECT_EQ(trace.events()[2].device_start_unix_ns, 1003000);
  EXPECT_EQ(trace.events()[2].device_duration_ns, 0);
  TraceRecorder no_clock(2);
  EXPECT_FALSE(no_clock.has_device_clock());
  EXPECT_TRUE(no_clock.Marks().empty());
}

// A stream command's event carries its wait from arrival to the loop (NoteArrival); a command
// without a noted arrival (a unary call) none.
TEST_F(DeviceTest, TracedEventsCarryTheQueueWaitOfStreamCommands) {
  ASSERT_TRUE(device_->StartProfile(session_, now_, 10).ok());
  const absl::Time arrival = absl::Now() - absl::Milliseconds(5);
  device_->NoteArrival(arrival);
  ASSERT_TRUE(device_->Flush(session_, now_).ok());
  device_->NoteArrival(absl::InfinitePast());
  ASSERT_TRUE(device_->Flush(session_, now_).ok());  // Nothing noted: a unary call.
  device_->NoteArrival(arrival);
  EXPECT_FALSE(device_->Release(session_, {HandleId(42)}, now_).ok());  // Records its event.
  device_->NoteArrival(absl::InfinitePast());
  ASSERT_TRUE(device_->Flush(session_, now_).ok());
  std::unique_ptr<TraceRecorder> trace;
  device_->EndProfile(
      session_, now_, [](absl::StatusOr<absl::Duration>) {}, &trace);
  ASSERT_NE(trace, nullptr);
  ASSERT_EQ(trace->events().size(), 4u);
  EXPECT_GE(trace->events()[0].queued_ns, 5000000);
  EXPECT_LT(trace->events()[0].queued_ns, 60000000000);
  EXPECT_EQ(trace->events()[1].queued_ns, 0);
  EXPECT_GE(trace->events()[2].queued_ns, 5000000);
  EXPECT_EQ(trace->events()[3].queued_ns, 0);
}

TEST_F(DeviceTest, UncheckedNeedsPermission) {
  ExecuteCommand c;
  c.kernel.builtin.name = "fill";
  c.unchecked = true;
  EXPECT_EQ(device_->Execute(session_, c, now_).code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(DeviceTest, DynamicCountNeedsTwelveBytes) {
  NewHandle h = *device_->Create(session_, Bytes("12345678"), now_);
  ExecuteCommand c;
  c.kernel.builtin.name = "fill";
  c.dynamic_count = true;
  c.count_binding = {h.handle, 0, 0};
  absl::Status s = device_->Execute(session_, c, now_);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("12"), absl::string_view::npos) << s;
}

TEST_F(DeviceTest, CubeCountBounds) {
  ExecuteCommand c;
  c.kernel.builtin.name = "fill";
  c.count[0] = 0;
  EXPECT_EQ(device_->Execute(session_, c, now_).code(), absl::StatusCode::kInvalidArgument);
  c.count[0] = 1;
  c.count[1] = 70000;
  absl::Status s = device_->Execute(session_, c, now_);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("static_count.y"), absl::string_view::npos) << s;
}

TEST_F(DeviceTest, CudaKernelsAreUnimplementedOnCpu) {
  ExecuteCommand c;
  c.kernel.is_builtin = false;
  c.kernel.cuda.code = "x";
  EXPECT_EQ(device_->Execute(session_, c, now_).code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace cubed
