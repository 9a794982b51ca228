// Copies between devices (issue 17; Note [Copies between devices], server/channel/device.h),
// through the C++ SDK's Client::CopyToDevice: three CPU devices (--cpu_devices=3), or on the
// cuda backend one GPU as three devices (--devices=0,0,0). Bytes checked, order kept on both sides,
// every error named with nothing left behind, memory back to zero.

#include <stdlib.h>

#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "tests/integration/integration_test.h"

namespace cubed::integration {
namespace {

using ::testing::HasSubstr;

class DeviceCopyTest : public DaemonTest, public ::testing::WithParamInterface<Transport> {
 protected:
  static void SetUpTestSuite() {
    if (testing::TestBackend() == "cuda") {
      // One GPU as three devices (Note [Repeated test devices], server/daemon/config.cc), so
      // that the copies between CUDA devices run on a host with one GPU.
      setenv("CUBED_TEST_REPEAT_DEVICES", "1", 1);
      StartDaemon({"--devices=0,0,0"});
      unsetenv("CUBED_TEST_REPEAT_DEVICES");
    } else {
      StartDaemon({"--cpu_devices=3"});
    }
  }
  // A client of `device` (or of device 0 where the daemon has one device only).
  std::unique_ptr<Client> On(uint32_t device) {
    ClientOptions options;
    options.transport = GetParam();
    options.device = device < devices_ ? device : 0;
    return Connect(options);
  }
  void SetUp() override {
    DaemonTest::SetUp();
    std::unique_ptr<Client> probe = Connect();
    absl::StatusOr<DaemonInfo> info = probe->GetInfo();
    ASSERT_TRUE(info.ok()) << info.status();
    devices_ = info->devices;
  }
  uint32_t devices_ = 1;
};

// Bytes in use on every device, from each device's own session.
std::vector<uint64_t> InUse(const std::vector<Client*>& clients) {
  std::vector<uint64_t> out;
  for (Client* c : clients) {
    absl::StatusOr<MemoryUsage> u = c->GetMemoryUsage();
    EXPECT_TRUE(u.ok()) << u.status();
    out.push_back(u.ok() ? u->bytes_in_use : 0);
  }
  return out;
}

TEST_P(DeviceCopyTest, CopiesBytesAcrossDevicesInOrder) {
  std::unique_ptr<Client> a = On(0), b = On(1), c = On(2);
  const std::vector<uint64_t> before = InUse({a.get(), b.get(), c.get()});
  std::vector<float> values(100000);
  std::iota(values.begin(), values.end(), 1.0f);
  {
    absl::StatusOr<Tensor> x = a->CreateTensor(ToBytes(values), {values.size()}, 4);
    ASSERT_TRUE(x.ok()) << x.status();
    // An execute queued before the copy on the source: the copy takes its output.
    absl::StatusOr<Tensor> doubled = a->EmptyTensor({values.size()}, 4);
    ASSERT_TRUE(doubled.ok()) << doubled.status();
    ASSERT_TRUE(a->Execute(Builtin("add", ElemType::kF32), {*x, *x}, {*doubled}).ok());
    // The tensor's dense bytes (a CUDA allocation may be longer: Note [Pitched tensors]).
    const uint64_t bytes = values.size() * 4;
    const Binding dense(doubled->handle, 0, doubled->handle.size() - bytes);
    absl::StatusOr<Handle> on_b = a->CopyToDevice(dense, *b);
    ASSERT_TRUE(on_b.ok()) << on_b.status();
    EXPECT_EQ(on_b->size(), bytes);
    // Sent after the copy: overwrites the source, which the copy must not see.
    absl::StatusOr<Handle> zeros = a->Create(std::vector<uint8_t>(bytes, 0));
    ASSERT_TRUE(zeros.ok()) << zeros.status();
    ASSERT_TRUE(a->CopyToDevice(*zeros, *a, doubled->handle).ok());
    // On to a third device, a range of it, into a given handle at an offset.
    absl::StatusOr<Handle> on_c = c->Create(std::vector<uint8_t>(64, 0xee));
    ASSERT_TRUE(on_c.ok()) << on_c.status();
    absl::StatusOr<Handle> same =
        b->CopyToDevice(Binding(*on_b, 4, on_b->size() - 12), *c, *on_c, 16);
    ASSERT_TRUE(same.ok()) << same.status();
    EXPECT_EQ(same->id(), on_c->id());

    const std::vector<float> got = FromBytes<float>(ReadOrDie(*b, *on_b));
    ASSERT_EQ(got.size(), values.size());
    for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(got[i], 2 * values[i]) << i;
    EXPECT_EQ(FromBytes<float>(ReadOrDie(*a, dense)), std::vector<float>(values.size(), 0.0f));
    const std::string range = ReadOrDie(*c, *on_c);
    EXPECT_EQ(range.substr(0, 16), std::string(16, '\xee'));
    EXPECT_EQ(FromBytes<float>(range.substr(16, 8)), (std::vector<float>{4.0f, 6.0f}));
    EXPECT_EQ(range.substr(24), std::string(40, '\xee'));
  }
  ASSERT_TRUE(a->FlushReleases().ok());
  ASSERT_TRUE(b->FlushReleases().ok());
  ASSERT_TRUE(c->FlushReleases().ok());
  EXPECT_EQ(InUse({a.get(), b.get(), c.get()}), before);
}

// Larger than a piece (kCopyPieceBytes, 16 MiB) and not a multiple of it: three pieces, the
// last 12 bytes, each byte where it belongs.
TEST_P(DeviceCopyTest, CopiesOfSeveralPiecesKeepEveryByte) {
  std::unique_ptr<Client> a = On(0), b = On(1);
  std::mt19937_64 rng(17);
  const std::string bytes = RandomBytes(rng, (size_t{32} << 20) + 12);
  absl::StatusOr<Handle> src = a->Create(AsSpan(bytes));
  ASSERT_TRUE(src.ok()) << src.status();
  absl::StatusOr<Handle> copy = a->CopyToDevice(*src, *b);
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_EQ(copy->size(), bytes.size());
  EXPECT_TRUE(ReadOrDie(*b, *copy) == bytes);
  // Over a given handle at an offset, from a view that starts mid-piece.
  absl::StatusOr<Handle> over = b->Empty(bytes.size() + 100);
  ASSERT_TRUE(over.ok()) << over.status();
  absl::StatusOr<Handle> same = a->CopyToDevice(Binding(*src, 5, 0), *b, *over, 100);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_TRUE(ReadOrDie(*b, Binding(*over, 100, 5)) == bytes.substr(5));
}

TEST_P(DeviceCopyTest, BadCopiesAreNamedAndLeaveNothingBehind) {
  std::unique_ptr<Client> a = On(0), b = On(1);
  absl::StatusOr<Handle> src = a->Create(std::vector<uint8_t>(64, 1));
  ASSERT_TRUE(src.ok()) << src.status();
  absl::StatusOr<Handle> dst = b->Create(std::vector<uint8_t>(16, 2));
  ASSERT_TRUE(dst.ok()) << dst.status();
  ASSERT_TRUE(a->Sync().get().ok());
  ASSERT_TRUE(b->Sync().get().ok());
  const std::vector<uint64_t> before = InUse({a.get(), b.get()});

  absl::StatusOr<Handle> r = a->CopyToDevice(*src, *b, *dst);  // 64 bytes into 16.
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("exceed the 16 bytes of handle"));
  r = a->CopyToDevice(Binding(*src, 0, 56), *b, *dst, 9);  // 8 bytes at 9 of 16.
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("bytes [9, +8) exceed"));
  r = a->CopyToDevice(Binding(*src, 64, 0), *b);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("the binding is empty"));
  r = a->CopyToDevice(Binding(*src, 0, 32), *a, *src, 8);  // Over itself, overlapping.
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("overlap the source"));
  r = a->CopyToDevice(*src, *b, Handle(), 4);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  // An id the target's session does not have.
  Handle unknown = b->Adopt(777, 64);
  unknown.Detach();  // Not b's to release.
  r = a->CopyToDevice(*src, *b, unknown);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("target_handle: handle"));

  EXPECT_EQ(InUse({a.get(), b.get()}), before);
  EXPECT_EQ(ReadOrDie(*a, *src), std::string(64, '\x01'));
  EXPECT_EQ(ReadOrDie(*b, *dst), std::string(16, '\x02'));
}

TEST_P(DeviceCopyTest, AClosedTargetSessionIsNotFound) {
  std::unique_ptr<Client> a = On(0), b = On(1);
  absl::StatusOr<Handle> src = a->Create(std::vector<uint8_t>(8, 1));
  ASSERT_TRUE(src.ok()) << src.status();
  const std::vector<uint64_t> before = InUse({a.get()});
  ClientOptions options;
  options.transport = Transport::kUnary;
  options.device = b->options().device;
  std::unique_ptr<Client> gone = Connect(options);
  ClientOptions join = options;
  join.session = gone->session();
  std::unique_ptr<Client> joined = Connect(join);
  gone.reset();  // Closes the session that `joined` names.
  absl::StatusOr<Handle> r = a->CopyToDevice(*src, *joined);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("is not open"));
  EXPECT_EQ(InUse({a.get()}), before);
}

INSTANTIATE_TEST_SUITE_P(Transports, DeviceCopyTest,
                         ::testing::Values(Transport::kStream, Transport::kUnary),
                         [](const ::testing::TestParamInfo<Transport>& info) {
                           return info.param == Transport::kStream ? "Stream" : "Unary";
                         });

}  // namespace
}  // namespace cubed::integration
