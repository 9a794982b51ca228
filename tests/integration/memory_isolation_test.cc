// Memory that changes session is zeroed before the new session sees it (docs/security.md,
// "Memory isolation"; Note [Owner-tagged memory] in storage/memory_manager.cc): a session that
// allocates uninitialized memory (Empty, EmptyTensor, a kernel's output) or creates data smaller
// than its allocation never reads bytes another session freed, whatever the pool (small, medium
// or exclusive pages); a session reusing its own memory keeps working. Backend-neutral: the
// same tests run against the CUDA backend (cuda.cubed_integration_tests).

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "tests/integration/kernel_test_util.h"

namespace cubed::integration {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// One daemon for this suite alone, so that its pools hold only what these tests freed.
class MemoryIsolationTest : public DaemonTest {
 protected:
  static void SetUpTestSuite() { StartDaemon({}); }
};

// `n` bytes, none of them zero.
std::string Secret(std::mt19937_64& rng, size_t n) {
  std::string s = RandomBytes(rng, n);
  for (char& c : s) c = static_cast<char>(1 + static_cast<uint8_t>(c) % 255);
  return s;
}

// Bytes of `s` that are not zero.
uint64_t NonZero(const std::string& s) {
  return static_cast<uint64_t>(std::count_if(s.begin(), s.end(), [](char c) { return c != 0; }));
}

// Sizes that land in each pool of the ladder (Note [Pool layout]): small, medium, exclusive.
const std::vector<uint64_t> kSizes = {63, 3 * kMiB + 17, 20 * kMiB + 5};

// Session A creates `size` secret bytes, checks they are there, and releases them.
void CreateAndRelease(Client& a, const std::string& secret) {
  absl::StatusOr<Handle> h = a.Create(AsSpan(secret));
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_TRUE(ReadOrDie(a, *h) == secret);
  *h = Handle();
  ASSERT_TRUE(a.FlushReleases().ok());
  ASSERT_TRUE(a.Sync().get().ok());
}

TEST_F(MemoryIsolationTest, EmptyNeverShowsAnotherSessionsFreedBytes) {
  std::mt19937_64 rng(1);
  auto a = Connect();
  auto b = Connect();
  ASSERT_TRUE(a && b);
  for (uint64_t size : kSizes) {
    SCOPED_TRACE(absl::StrCat("size ", size));
    CreateAndRelease(*a, Secret(rng, size));
    absl::StatusOr<Handle> e = b->Empty(size);
    ASSERT_TRUE(e.ok()) << e.status();
    const std::string got = ReadOrDie(*b, *e);
    ASSERT_EQ(got.size(), size);
    EXPECT_EQ(NonZero(got), 0u) << "session B read bytes session A freed";
  }
}

TEST_F(MemoryIsolationTest, EmptyTensorNeverShowsAnotherSessionsFreedBytes) {
  std::mt19937_64 rng(2);
  // {5, 900} f32 and {1100, 4100} f32 are pitched on CUDA (rows padded to 256 bytes): the raw
  // read of the handle returns the padding too.
  for (const std::vector<uint64_t>& shape :
       std::vector<std::vector<uint64_t>>{{3, 7}, {5, 900}, {700, 1100}, {1100, 4100}}) {
    SCOPED_TRACE(ShapeString(shape));
    const uint64_t bytes = NumElements(shape) * 4;
    {
      auto a = Connect();
      ASSERT_NE(a, nullptr);
      const std::string secret = Secret(rng, bytes);
      absl::StatusOr<Tensor> t = a->CreateTensor(AsSpan(secret), shape, 4);
      ASSERT_TRUE(t.ok()) << t.status();
      ASSERT_TRUE(ReadTensorOrDie(*a, *t) == secret);
      ASSERT_TRUE(a->Sync().get().ok());
    }  // A closes its session: its memory goes back to the pools.
    auto b = Connect();
    ASSERT_NE(b, nullptr);
    absl::StatusOr<Tensor> e = b->EmptyTensor(shape, 4);
    ASSERT_TRUE(e.ok()) << e.status();
    const std::string dense = ReadTensorOrDie(*b, *e);
    ASSERT_EQ(dense.size(), bytes);
    EXPECT_EQ(NonZero(dense), 0u) << "ReadTensor showed bytes session A freed";
    const std::string raw = ReadOrDie(*b, e->handle);
    ASSERT_EQ(raw.size(), e->handle.size());
    EXPECT_EQ(NonZero(raw), 0u) << "a raw Read (padding included) showed bytes session A freed";
  }
}

TEST_F(MemoryIsolationTest, KernelOutputsNeverShowAnotherSessionsBytes) {
  std::mt19937_64 rng(3);
  const std::vector<uint64_t> shape = {1000};
  {
    // A's secrets are written by a kernel, on the device.
    auto a = Connect();
    ASSERT_NE(a, nullptr);
    HostTensor<float> in = RandomTensor<float>(rng, shape, 1, 1000);
    Tensor x = Upload(*a, in);
    Tensor y = Output(*a, shape, 4);
    ASSERT_TRUE(a->Execute(Builtin("neg", ElemType::kF32), {x}, {y}).ok());
    EXPECT_EQ(Download<float>(*a, y)[0], -in.data[0]);
  }
  auto b = Connect();
  ASSERT_NE(b, nullptr);
  Tensor out = Output(*b, shape, 4);
  Tensor spare = Output(*b, shape, 4);
  EXPECT_EQ(NonZero(ReadTensorOrDie(*b, out)), 0u) << "an output before its kernel ran";
  EXPECT_EQ(NonZero(ReadTensorOrDie(*b, spare)), 0u);
  Tensor ones = Upload(*b, HostTensor<float>{shape, std::vector<float>(1000, 1.0f)});
  ASSERT_TRUE(b->Execute(Builtin("neg", ElemType::kF32), {ones}, {out}).ok());
  EXPECT_EQ(Download<float>(*b, out), std::vector<float>(1000, -1.0f));
}

TEST_F(MemoryIsolationTest, CreatePaddingNeverCarriesAnotherSessionsBytes) {
  std::mt19937_64 rng(4);
  auto a = Connect();
  auto b = Connect();
  ASSERT_TRUE(a && b);
  // B's 1-byte create takes A's freed slice; the rest of the slice (padding B cannot address)
  // must not keep A's bytes, or B reads them back through a later, larger slice of its own.
  // A's second slice, kept, stops the freed one from merging with the free memory after it.
  absl::StatusOr<Handle> freed = a->Create(AsSpan(Secret(rng, 63)));
  absl::StatusOr<Handle> kept = a->Create(AsSpan(Secret(rng, 63)));
  ASSERT_TRUE(freed.ok() && kept.ok());
  *freed = Handle();
  ASSERT_TRUE(a->FlushReleases().ok());
  ASSERT_TRUE(a->Sync().get().ok());
  {
    absl::StatusOr<Handle> h = b->Create(AsSpan(std::string("b")));
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ(ReadOrDie(*b, *h), "b");
  }
  ASSERT_TRUE(b->FlushReleases().ok());
  absl::StatusOr<Handle> e = b->Empty(63);
  ASSERT_TRUE(e.ok()) << e.status();
  const std::string got = ReadOrDie(*b, *e);
  ASSERT_EQ(got.size(), 63u);
  EXPECT_EQ(NonZero(got.substr(1)), 0u) << "B read A's bytes from the padding of its own slice";

  // A pitched tensor's row padding (CUDA) is not covered by the data either.
  const std::vector<uint64_t> shape = {5, 900};
  const uint64_t bytes = NumElements(shape) * 4;
  {
    absl::StatusOr<Tensor> t = a->CreateTensor(AsSpan(Secret(rng, bytes)), shape, 4);
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_TRUE(a->Sync().get().ok());
  }
  ASSERT_TRUE(a->FlushReleases().ok());
  const std::string data = Secret(rng, bytes);
  absl::StatusOr<Tensor> t = b->CreateTensor(AsSpan(data), shape, 4);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(ReadTensorOrDie(*b, *t) == data);
  const std::string raw = ReadOrDie(*b, t->handle);
  const uint64_t width = shape[1] * 4, pitch = t->strides[0] * 4;
  ASSERT_EQ(raw.size(), t->handle.size());
  ASSERT_GE(raw.size(), pitch * (shape[0] - 1) + width);
  std::string padding;
  for (uint64_t row = 0; row < shape[0]; ++row) {
    EXPECT_TRUE(raw.substr(row * pitch, width) == data.substr(row * width, width)) << row;
    padding += raw.substr(row * pitch + width, pitch - width);
  }
  padding += raw.substr(std::min<uint64_t>(raw.size(), shape[0] * pitch));
  EXPECT_EQ(NonZero(padding), 0u) << "B read A's bytes in the padding of its tensor";
}

TEST_F(MemoryIsolationTest, ASessionReusingItsOwnMemoryKeepsWorking) {
  std::mt19937_64 rng(5);
  auto a = Connect();
  ASSERT_NE(a, nullptr);
  for (uint64_t size : kSizes) {
    SCOPED_TRACE(absl::StrCat("size ", size));
    const std::string secret = Secret(rng, size);
    CreateAndRelease(*a, secret);
    // Its own memory: not zeroed (that is what keeps reuse free), and only its own bytes.
    absl::StatusOr<Handle> e = a->Empty(size);
    ASSERT_TRUE(e.ok()) << e.status();
    const std::string got = ReadOrDie(*a, *e);
    EXPECT_TRUE(got == secret || NonZero(got) == 0u) << "neither A's own bytes nor zeros";
    *e = Handle();
    ASSERT_TRUE(a->FlushReleases().ok());
    const std::string again = Secret(rng, size);
    absl::StatusOr<Handle> h = a->Create(AsSpan(again));
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_TRUE(ReadOrDie(*a, *h) == again);
  }
}

}  // namespace
}  // namespace cubed::integration
