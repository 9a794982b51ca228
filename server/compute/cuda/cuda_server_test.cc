#include "server/compute/cuda/cuda_server.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/cuda/cuda_driver.h"
#include "common/kernel_metadata.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/compute/compute_server_conformance.h"
#include "server/compute/cuda/cuda_test_util.h"

namespace cubed {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing_cuda::EndProfileNow;
using testing_cuda::kTestOwner;
using testing_cuda::MakeCudaServer;
using testing_cuda::RandomBytes;
using testing_cuda::ReadAll;
using testing_cuda::ReadTensors;
using testing_cuda::SyncNow;

absl::Span<const uint8_t> Bytes(const std::string& s) {
  return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

// The example kernel of docs/kernel-abi.md, "CUDA kernels" (keep the two identical).
constexpr char kAxpySource[] = R"(
struct F32x2 { float v[2]; };  // The f32 scalar group: a, b.

// y[i] = a * x[i] + b * y[i] for every element of y.
extern "C" __global__ void axpby(const float* x, float* y, const unsigned int* metadata,
                                 F32x2 scalars) {
  const unsigned int n = metadata[1];  // buffer_len of buffer 1 (y), in elements.
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x) {
    y[i] = scalars.v[0] * x[i] + scalars.v[1] * y[i];
  }
}
)";

// The f32 in 4 bytes (0 for any other size).
float AsFloat(const std::string& bytes) {
  float v = 0;
  if (bytes.size() == 4) std::memcpy(&v, bytes.data(), 4);
  return v;
}

class CudaServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CUBED_SKIP_WITHOUT_CUDA();
    server_ = MakeCudaServer();
    ASSERT_NE(server_, nullptr);
  }

  Allocation CreateOrDie(const std::string& data) {
    absl::StatusOr<Allocation> a = server_->Create(Bytes(data), kTestOwner);
    EXPECT_TRUE(a.ok()) << a.status();
    return a.ok() ? *a : Allocation{};
  }

  std::string ReadOrDie(const ResolvedBinding& b) {
    absl::StatusOr<std::vector<std::string>> out = ReadAll(*server_, {b});
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? (*out)[0] : "";
  }

  Launch ClientLaunch(const std::string& code, const std::string& entry, bool ptx = false) {
    Launch launch;
    launch.kernel.is_builtin = false;
    launch.kernel.cuda.code = code;
    launch.kernel.cuda.entry_point = entry;
    launch.kernel.cuda.is_ptx = ptx;
    launch.kernel.cuda.cube_dim[0] = 128;
    return launch;
  }

  // A kernel of one thread that spins ~20 ms, then writes 42.0f to `y` (a 4-byte allocation).
  Launch SlowWrite(const Allocation& y) {
    Launch slow = ClientLaunch(R"(
extern "C" __global__ void slow_write(float* y, const unsigned int* metadata) {
  const long long start = clock64();
  while (clock64() - start < 40000000LL) {
  }
  y[0] = 42.0f;
})",
                               "slow_write");
    slow.kernel.cuda.cube_dim[0] = 1;
    slow.count.x = 1;
    slow.buffers = {{y.slice, 0, y.size}};
    slow.kernel.builtin.metadata = kernels::ToMetadataWords(*EncodeKernelMetadata({1}, {}));
    return slow;
  }

  // Runs SlowWrite(y), then reads y: not answered at once (not inline while the kernel runs),
  // then answered with the kernel's 42.0f.
  void ExpectAReadWaitsForTheSlowWrite(const Allocation& y) {
    ASSERT_TRUE(server_->Execute(SlowWrite(y)).ok());
    std::vector<std::string> behind_kernel;
    absl::Notification read_done;
    absl::Status read_status;
    server_->Read({{y.slice, 0, y.size}}, &behind_kernel, [&](absl::Status s) {
      read_status = s;
      read_done.Notify();
    });
    EXPECT_FALSE(read_done.HasBeenNotified()) << "answered while the kernel still ran";
    read_done.WaitForNotification();
    ASSERT_TRUE(read_status.ok()) << read_status;
    EXPECT_EQ(AsFloat(behind_kernel[0]), 42.0f);
  }

  std::unique_ptr<CudaServer> server_;
};

TEST_F(CudaServerTest, DescriptionNamesTheDeviceAndItsLimits) {
  const DeviceDescription& d = server_->Description();
  EXPECT_EQ(d.backend, DeviceDescription::Backend::kCuda);
  EXPECT_FALSE(d.name.empty());
  EXPECT_THAT(d.compute_capability, ::testing::MatchesRegex("[0-9]+\\.[0-9]+"));
  EXPECT_GT(d.compute_units, 0u);
  EXPECT_EQ(d.alignment, 256u);
  EXPECT_EQ(d.max_cube_dim[0], 1024u);
  EXPECT_GE(d.max_cube_count[0], 65535u);
  EXPECT_GT(d.memory_total, d.memory_limit / 2);
  EXPECT_THAT(d.builtin_kernels, ::testing::Contains("matmul"));
  EXPECT_THAT(d.features, ::testing::Contains("cuda_source"));
}

TEST_F(CudaServerTest, CreateThenReadGivesTheBytesBack) {
  for (size_t size : {size_t{1}, size_t{4096}, size_t{100} << 20}) {  // 100 MiB: many chunks.
    const std::string data = RandomBytes(size, static_cast<uint32_t>(size));
    Allocation a = CreateOrDie(data);
    EXPECT_EQ(ReadOrDie({a.slice, 0, a.size}), data) << size << " bytes";
    if (size > 300) {
      EXPECT_EQ(ReadOrDie({a.slice, 100, 200}), data.substr(100, 200));
    }
    server_->Free(a.slice);
  }
  EXPECT_LE(server_->staging().bytes_held(), uint64_t{64} << 20);
}

TEST_F(CudaServerTest, ManyReadsInOneCallComeBackInOrder) {
  const std::string a_data = RandomBytes(1000, 1), b_data = RandomBytes(3000, 2);
  Allocation a = CreateOrDie(a_data), b = CreateOrDie(b_data);
  absl::StatusOr<std::vector<std::string>> out =
      ReadAll(*server_, {{b.slice, 0, b.size}, {a.slice, 10, 0}, {a.slice, 0, a.size}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(*out, ElementsAre(b_data, "", a_data));
}

// Note [Inline small reads]: a small read on an idle device is answered before Read returns; one
// behind a running kernel waits for it, and one behind an answer still to come is answered after
// it. Each sees the bytes the work before it wrote.
TEST_F(CudaServerTest, SmallReadsSeeEarlierWorkAndAnswerInOrder) {
  const std::string zero(4, '\0');
  Allocation y = CreateOrDie(zero);
  Launch slow = SlowWrite(y);
  auto as_float = AsFloat;

  // Behind a running kernel: not answered at once, then the kernel's value.
  ExpectAReadWaitsForTheSlowWrite(y);

  // Behind an answer still to come (a sync after a kernel): answered after it.
  ASSERT_TRUE(server_->Execute(slow).ok());
  std::vector<int> order;
  absl::Mutex mu;
  absl::Notification both;
  server_->Sync([&](absl::Status s) {
    EXPECT_TRUE(s.ok()) << s;
    absl::MutexLock lock(&mu);
    order.push_back(1);
  });
  std::vector<std::string> behind_sync;
  server_->Read({{y.slice, 0, y.size}}, &behind_sync, [&](absl::Status s) {
    EXPECT_TRUE(s.ok()) << s;
    {
      absl::MutexLock lock(&mu);
      order.push_back(2);
    }
    both.Notify();
  });
  both.WaitForNotification();
  {
    absl::MutexLock lock(&mu);
    EXPECT_THAT(order, ElementsAre(1, 2));
  }
  EXPECT_EQ(as_float(behind_sync[0]), 42.0f);

  // On an idle device: answered before Read returns (drivers with cuStreamQuery).
  ASSERT_TRUE(SyncNow(*server_).ok());
  std::vector<std::string> idle;
  bool answered = false;
  server_->Read({{y.slice, 0, y.size}}, &idle, [&](absl::Status s) {
    EXPECT_TRUE(s.ok()) << s;
    answered = true;
  });
  if (Cu().StreamQuery != nullptr) {
    EXPECT_TRUE(answered) << "a 4-byte read on an idle device went through the completion thread";
  }
  ASSERT_TRUE(SyncNow(*server_).ok());  // The usual path's answer, where it was taken, is in.
  EXPECT_TRUE(answered);
  EXPECT_EQ(as_float(idle[0]), 42.0f);
  server_->Free(y.slice);
}

// Note [Inline small reads]: after an inline read the stream is remembered idle (no query before
// the next); a launch forgets it, so a read behind a running kernel still waits for the kernel.
TEST_F(CudaServerTest, AStreamSeenIdleIsForgottenByALaunch) {
  if (Cu().StreamQuery == nullptr) GTEST_SKIP() << "no cuStreamQuery: no inline reads";
  Allocation y = CreateOrDie(std::string(4, '\0'));
  ASSERT_TRUE(SyncNow(*server_).ok());
  for (int i = 0; i < 3; ++i) {  // The first queries the stream, the others need not.
    std::vector<std::string> out;
    bool answered = false;
    server_->Read({{y.slice, 0, y.size}}, &out, [&](absl::Status s) {
      EXPECT_TRUE(s.ok()) << s;
      answered = true;
    });
    EXPECT_TRUE(answered) << "read " << i << " on an idle stream was not answered inline";
    EXPECT_EQ(AsFloat(out[0]), 0.0f);
  }
  ExpectAReadWaitsForTheSlowWrite(y);
  server_->Free(y.slice);
}

// Note [Inline small reads]: on an idle device the loop copies several bindings through one pinned
// buffer; each string gets its own bytes, an empty view none, and odd sizes and offsets hold.
TEST_F(CudaServerTest, AnInlineReadOfSeveralBindingsGivesEachItsBytes) {
  const std::string a_data = RandomBytes(13, 1), b_data = RandomBytes(4096, 2);
  Allocation a = CreateOrDie(a_data);
  Allocation b = CreateOrDie(b_data);
  ASSERT_TRUE(SyncNow(*server_).ok());
  std::vector<std::string> out;
  bool answered = false;
  absl::Status status;
  server_->Read({{b.slice, 3, 1000}, {a.slice, 0, 0}, {a.slice, 0, 13}, {b.slice, 0, 5}}, &out,
                [&](absl::Status s) {
                  status = s;
                  answered = true;
                });
  if (Cu().StreamQuery != nullptr) {
    EXPECT_TRUE(answered) << "not answered inline";
  }
  ASSERT_TRUE(SyncNow(*server_).ok());
  ASSERT_TRUE(answered);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(out, ElementsAre(b_data.substr(3, 1000), "", a_data, b_data.substr(0, 5)));
  server_->Free(a.slice);
  server_->Free(b.slice);
}

TEST_F(CudaServerTest, TensorsArePitchedAndReadBackDensely) {
  const std::vector<uint64_t> shape = {3, 1000};
  const std::string data = RandomBytes(3 * 1000 * 4, 7);
  absl::StatusOr<Allocation> a = server_->CreateTensor(Bytes(data), shape, 4, kTestOwner);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(a->strides, ElementsAre(1024, 1));  // 4000-byte rows padded to 4096.
  EXPECT_EQ(a->size, 3u * 4096);
  const std::string raw = ReadOrDie({a->slice, 0, a->size});
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(raw.substr(r * 4096, 4000), data.substr(r * 4000, 4000)) << "row " << r;
  }
  ResolvedTensor t{{a->slice, 0, a->size}, shape, a->strides, 4};
  ResolvedTensor transposed{{a->slice, 0, a->size}, {1000, 3}, {1, 1024}, 4};
  ResolvedTensor broadcast{{a->slice, 0, a->size}, {2, 1000}, {0, 1}, 4};
  absl::StatusOr<std::vector<std::string>> out = ReadTensors(*server_, {t, transposed, broadcast});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0], data);
  std::string want_t;
  for (int c = 0; c < 1000; ++c) {
    for (int r = 0; r < 3; ++r) want_t += data.substr((r * 1000 + c) * 4, 4);
  }
  EXPECT_EQ((*out)[1], want_t);
  EXPECT_EQ((*out)[2], data.substr(0, 4000) + data.substr(0, 4000));

  absl::StatusOr<Allocation> e = server_->EmptyTensor({2, 5, 1000}, 4, kTestOwner);
  ASSERT_TRUE(e.ok());
  EXPECT_THAT(e->strides, ElementsAre(5 * 1024, 1024, 1));
}

// Note [Owner-tagged memory] (storage/memory_manager.cc) on the device: what owner A freed is
// zeroed, in stream order, before owner B sees it; A reusing its own memory is not zeroed.
constexpr MemoryOwner kA = kTestOwner + 1, kB = kTestOwner + 2;

uint64_t NonZero(const std::string& s) {
  return static_cast<uint64_t>(std::count_if(s.begin(), s.end(), [](char c) { return c != 0; }));
}

TEST_F(CudaServerTest, EmptyZeroesAnotherOwnersBytesButNotItsOwn) {
  for (uint64_t size : {uint64_t{1000}, uint64_t{3} << 20, uint64_t{40} << 20}) {  // Each pool.
    SCOPED_TRACE(size);
    const std::string secret = std::string(size, '\x5a');
    absl::StatusOr<Allocation> a = server_->Create(Bytes(secret), kA);
    ASSERT_TRUE(a.ok()) << a.status();
    server_->Free(a->slice);  // No wait: what follows is ordered after the copy on the stream.
    absl::StatusOr<Allocation> own = server_->Empty(size, kA);
    ASSERT_TRUE(own.ok()) << own.status();
    EXPECT_EQ(ReadOrDie({own->slice, 0, own->size}), secret) << "A's own bytes, not zeroed";
    server_->Free(own->slice);
    absl::StatusOr<Allocation> b = server_->Empty(size, kB);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(NonZero(ReadOrDie({b->slice, 0, b->size})), 0u) << "B saw A's bytes";
    server_->Free(b->slice);
  }
}

TEST_F(CudaServerTest, CreateTensorZeroesTheRowPaddingOfAnotherOwnersBytes) {
  const std::vector<uint64_t> shape = {3, 1000};  // Rows of 4000 bytes, pitch 4096.
  absl::StatusOr<Allocation> a =
      server_->CreateTensor(Bytes(std::string(12000, '\x5a')), shape, 4, kA);
  ASSERT_TRUE(a.ok()) << a.status();
  server_->Free(a->slice);
  const std::string data = RandomBytes(12000, 9);
  absl::StatusOr<Allocation> t = server_->CreateTensor(Bytes(data), shape, 4, kB);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->size, 3u * 4096);
  const std::string raw = ReadOrDie({t->slice, 0, t->size});
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(raw.substr(r * 4096, 4000), data.substr(r * 4000, 4000)) << "row " << r;
    EXPECT_EQ(NonZero(raw.substr(r * 4096 + 4000, 96)), 0u) << "padding of row " << r;
  }
  server_->Free(t->slice);
  absl::StatusOr<Allocation> e = server_->EmptyTensor(shape, 4, kA);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(NonZero(ReadOrDie({e->slice, 0, e->size})), 0u) << "A saw B's tensor";
}

TEST_F(CudaServerTest, CreateZeroesTheRestOfItsSliceOfAnotherOwnersBytes) {
  absl::StatusOr<Allocation> first = server_->Create(Bytes(std::string(256, '\x5a')), kA);
  absl::StatusOr<Allocation> second = server_->Create(Bytes(std::string(256, '\x5a')), kA);
  ASSERT_TRUE(first.ok() && second.ok());
  server_->Free(first->slice);  // A hole of 256 bytes; `second` keeps it from merging.
  absl::StatusOr<Allocation> small = server_->Create(Bytes("b"), kB);
  ASSERT_TRUE(small.ok()) << small.status();
  server_->Free(small->slice);
  absl::StatusOr<Allocation> wide = server_->Empty(256, kB);  // B's own hole: not zeroed.
  ASSERT_TRUE(wide.ok()) << wide.status();
  const std::string got = ReadOrDie({wide->slice, 0, 256});
  EXPECT_EQ(got[0], 'b') << "B's own slice again";
  EXPECT_EQ(NonZero(got.substr(1)), 0u) << "the rest of B's 1-byte create kept A's bytes";
}

TEST_F(CudaServerTest, FreeAndCleanupReturnTheMemory) {
  absl::StatusOr<Allocation> a = server_->Empty(uint64_t{300} << 20, kTestOwner);
  ASSERT_TRUE(a.ok());
  EXPECT_GE(server_->Usage().bytes_reserved, uint64_t{300} << 20);
  server_->Free(a->slice);
  server_->Cleanup();
  EXPECT_EQ(server_->Usage().bytes_reserved, 0u);
  EXPECT_EQ(server_->Usage().number_allocs, 0u);
}

TEST_F(CudaServerTest, OverTheMemoryLimitIsResourceExhausted) {
  absl::StatusOr<Allocation> a = server_->Empty(uint64_t{1536} << 20, kTestOwner);  // Limit: 2 GiB.
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<Allocation> b = server_->Empty(uint64_t{1} << 30, kTestOwner);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted) << b.status();
  EXPECT_EQ(server_->Usage().number_allocs, 1u);  // The failed request left no trace.
}

TEST_F(CudaServerTest, ProfileMeasuresDeviceTime) {
  absl::StatusOr<Allocation> out = server_->Empty(uint64_t{256} << 20, kTestOwner);
  ASSERT_TRUE(out.ok());
  absl::StatusOr<ProfileToken> token = server_->StartProfile();
  ASSERT_TRUE(token.ok());
  Launch fill;
  fill.kernel.builtin.name = "fill";
  fill.kernel.builtin.dtype = ElemType::kF32;
  TensorLayout layout = TensorLayout::Contiguous({uint64_t{64} << 20});
  fill.kernel.builtin.metadata =
      kernels::ToMetadataWords(*EncodeKernelMetadata({uint64_t{64} << 20}, {layout}));
  fill.kernel.builtin.scalars = {{ElemType::kF32, {0, 0, 0x80, 0x3f}}};  // 1.0f
  fill.buffers = {{out->slice, 0, out->size}};
  ASSERT_TRUE(server_->Execute(fill).ok());
  absl::StatusOr<absl::Duration> elapsed = EndProfileNow(*server_, *token);
  ASSERT_TRUE(elapsed.ok()) << elapsed.status();
  EXPECT_GT(*elapsed, absl::ZeroDuration());
  EXPECT_LT(*elapsed, absl::Seconds(10));
  EXPECT_EQ(ReadOrDie({out->slice, 4 * 1000, 4}), std::string("\0\0\x80\x3f", 4));
  EXPECT_TRUE(absl::IsInternal(EndProfileNow(*server_, *token).status()));
}

// Note [CUDA graph replays]: a graph of builtin launches replays as a CUDA graph, captured at the
// first replay (here with a split reduction that needs the launch workspace to grow first) and
// again whenever its parameter moved.
TEST_F(CudaServerTest, GraphReplaysRecaptureWhenTheParameterMoves) {
  constexpr uint64_t n = uint64_t{1} << 22;  // Sums of 1s and 2s stay exact in f32.
  const std::vector<float> ones(n, 1.0f), twos(n, 2.0f);
  Allocation x1 = CreateOrDie(std::string(reinterpret_cast<const char*>(ones.data()), n * 4));
  Allocation x2 = CreateOrDie(std::string(reinterpret_cast<const char*>(twos.data()), n * 4));
  absl::StatusOr<Allocation> doubled = server_->Empty(n * 4, kTestOwner);
  absl::StatusOr<Allocation> total = server_->Empty(4, kTestOwner);
  ASSERT_TRUE(doubled.ok() && total.ok());
  const TensorLayout vec = TensorLayout::Contiguous({n});
  const TensorLayout one = TensorLayout::Contiguous({1});
  Launch add;
  add.kernel.builtin.name = "add";
  add.kernel.builtin.metadata =
      kernels::ToMetadataWords(*EncodeKernelMetadata({n, n, n}, {vec, vec, vec}));
  Launch sum;
  sum.kernel.builtin.name = "sum";
  sum.kernel.builtin.metadata = kernels::ToMetadataWords(*EncodeKernelMetadata({n, 1}, {vec, one}));
  sum.buffers = {{doubled->slice, 0, n * 4}, {total->slice, 0, 4}};
  std::unique_ptr<GraphExecutable> executable;
  auto replay = [&](const Allocation& x) -> float {
    add.buffers = {{x.slice, 0, n * 4}, {x.slice, 0, n * 4}, {doubled->slice, 0, n * 4}};
    const Launch launches[] = {add, sum};
    const SliceId parameters[] = {x.slice};
    absl::Status s = server_->ExecuteGraph(launches, parameters, executable);
    EXPECT_TRUE(s.ok()) << s;
    float v = 0;
    std::memcpy(&v, ReadOrDie({total->slice, 0, 4}).data(), 4);
    return v;
  };
  EXPECT_EQ(replay(x1), 2.0f * n);
  EXPECT_NE(executable, nullptr);
  EXPECT_EQ(replay(x1), 2.0f * n);
  EXPECT_EQ(replay(x2), 4.0f * n);
  EXPECT_EQ(replay(x2), 4.0f * n);
  EXPECT_EQ(replay(x1), 2.0f * n);
  server_->Cleanup();  // Frees the workspace: the captured graph is stale and is captured again.
  EXPECT_EQ(replay(x2), 4.0f * n);
  executable.reset();
  EXPECT_TRUE(SyncNow(*server_).ok());
}

TEST_F(CudaServerTest, SyncAndFlushComplete) {
  EXPECT_TRUE(server_->Flush().ok());
  EXPECT_TRUE(SyncNow(*server_).ok());
}

TEST_F(CudaServerTest, DocumentedCudaSourceExampleRuns) {
  constexpr uint64_t n = 1000;
  std::vector<float> x(n), y(n);
  for (uint64_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i);
    y[i] = 1.0f;
  }
  const std::string xs(reinterpret_cast<const char*>(x.data()), n * 4);
  const std::string ys(reinterpret_cast<const char*>(y.data()), n * 4);
  Allocation xa = CreateOrDie(xs), ya = CreateOrDie(ys);
  Launch launch = ClientLaunch(kAxpySource, "axpby");
  launch.count.x = 4;
  launch.buffers = {{xa.slice, 0, xa.size}, {ya.slice, 0, ya.size}};
  launch.kernel.builtin.metadata = kernels::ToMetadataWords(*EncodeKernelMetadata({n, n}, {}));
  const float ab[2] = {2.0f, 3.0f};
  launch.kernel.builtin.scalars = {
      {ElemType::kF32, kernels::ScalarBytes(reinterpret_cast<const uint8_t*>(ab),
                                            reinterpret_cast<const uint8_t*>(ab) + 8)}};
  ASSERT_TRUE(server_->Execute(launch).ok());
  const std::string got = ReadOrDie({ya.slice, 0, ya.size});
  ASSERT_EQ(got.size(), n * 4);
  for (uint64_t i = 0; i < n; i += 97) {
    float v;
    std::memcpy(&v, got.data() + i * 4, 4);
    EXPECT_EQ(v, 2.0f * i + 3.0f) << "element " << i;
  }

  // The same kernel bound with the wrong parameters is refused before it runs.
  if (Cu().FuncGetParamInfo != nullptr) {
    Launch wrong = launch;
    wrong.buffers.pop_back();
    absl::Status s = server_->Execute(wrong);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr("declares 4 parameters"));
  }
}

TEST_F(CudaServerTest, ClientKernelErrorsAreInvalidArgument) {
  absl::Status compile = server_->Execute(ClientLaunch("this is not C++", "k"));
  EXPECT_EQ(compile.code(), absl::StatusCode::kInvalidArgument) << compile;
  absl::Status entry = server_->Execute(
      ClientLaunch("extern \"C\" __global__ void k(const unsigned int*) {}", "missing"));
  EXPECT_EQ(entry.code(), absl::StatusCode::kInvalidArgument) << entry;
  absl::Status ptx = server_->Execute(ClientLaunch(".version 1.0 garbage", "k", true));
  EXPECT_EQ(ptx.code(), absl::StatusCode::kInvalidArgument) << ptx;
  Launch big = ClientLaunch("extern \"C\" __global__ void k(const unsigned int*) {}", "k");
  big.kernel.cuda.shared_memory_bytes = 16 << 20;
  absl::Status shared = server_->Execute(big);
  EXPECT_EQ(shared.code(), absl::StatusCode::kInvalidArgument) << shared;
  EXPECT_THAT(shared.message(), HasSubstr("shared_memory_bytes"));
  EXPECT_TRUE(SyncNow(*server_).ok());  // Nothing above hurt the device.
}

TEST_F(CudaServerTest, PtxKernelsRunAndDynamicCountsAreReadFromTheDevice) {
  constexpr char kPtx[] = R"(
.version 7.0
.target sm_52
.address_size 64
.visible .entry mark(.param .u64 out, .param .u64 metadata) {
  .reg .b32 %r<3>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd1, %rd1;
  mov.u32 %r1, %ctaid.x;
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  add.u32 %r2, %r1, 1;
  st.global.u32 [%rd3], %r2;
  ret;
}
)";
  Allocation out = CreateOrDie(std::string(16, '\0'));
  const uint32_t count[3] = {3, 1, 1};
  Allocation count_buffer = CreateOrDie(std::string(reinterpret_cast<const char*>(count), 12));
  Launch launch = ClientLaunch(kPtx, "mark", /*ptx=*/true);
  launch.kernel.cuda.cube_dim[0] = 1;
  launch.count.dynamic = true;
  launch.count.binding = {count_buffer.slice, 0, 12};
  launch.buffers = {{out.slice, 0, out.size}};
  ASSERT_TRUE(server_->Execute(launch).ok());
  const uint32_t want[4] = {1, 2, 3, 0};  // Three cubes ran.
  EXPECT_EQ(ReadOrDie({out.slice, 0, 16}), std::string(reinterpret_cast<const char*>(want), 16));

  const uint32_t zero[3] = {0, 1, 1};
  Allocation bad = CreateOrDie(std::string(reinterpret_cast<const char*>(zero), 12));
  launch.count.binding = {bad.slice, 0, 12};
  absl::Status s = server_->Execute(launch);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("dynamic cube count: x = 0"));
}

TEST_F(CudaServerTest, AnotherProcessReadsTheBindingThroughItsIpcHandle) {
  const std::string data = RandomBytes(4096, 9);
  Allocation a = CreateOrDie(data);
  absl::StatusOr<ResourceDescription> r = server_->GetResource({a.slice, 256, 1024});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->device_pointer, 0u);
  EXPECT_EQ(r->size, 1024u);
  if (r->ipc_handle.empty()) GTEST_SKIP() << "CUDA IPC is refused on this system";
  ASSERT_EQ(r->ipc_handle.size(), 64u);
  ASSERT_TRUE(SyncNow(*server_).ok());                   // The upload has landed.
  const char* reader = getenv("CUBED_CUDA_IPC_READER");  // Where the build tree moved.
  const std::string command =
      absl::StrCat(reader != nullptr ? reader : CUBED_CUDA_IPC_READER, " ",
                   absl::BytesToHexString(r->ipc_handle), " ", r->offset, " ", r->size, " 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), pipe)) output.append(buf, n);
  EXPECT_EQ(pclose(pipe), 0) << output;
  EXPECT_EQ(output, absl::BytesToHexString(data.substr(256, 1024)) + "\n");
}

// Note [Imported memory]: every bad source is refused with its reason and leaves nothing
// mapped or allocated; the server goes on working.
TEST_F(CudaServerTest, ImportRefusesBadSourcesAndLeavesNothing) {
  const MemoryUsage before = server_->Usage();
  const std::string uuid = server_->Description().uuid;
  auto refused = [&](const ImportSource& source, absl::StatusCode code, const std::string& why) {
    absl::StatusOr<Allocation> a = server_->Import(source);
    EXPECT_EQ(a.status().code(), code) << a.status();
    EXPECT_THAT(std::string(a.status().message()), HasSubstr(why));
  };
  ImportSource s;
  s.ipc_handle = std::string(63, 'x');
  s.size = 256;
  s.device_uuid = uuid;
  refused(s, absl::StatusCode::kInvalidArgument, "63 bytes");
  s.ipc_handle = RandomBytes(64, 3);
  s.size = 0;
  refused(s, absl::StatusCode::kInvalidArgument, "size: 0");
  s.size = 256;
  s.device_uuid = "GPU-00000000-0000-0000-0000-000000000000";
  refused(s, absl::StatusCode::kInvalidArgument, "device_uuid");
  s.device_uuid = uuid;
  refused(s, absl::StatusCode::kInvalidArgument, "cannot open it");  // Not a live handle.
  // This process's own allocation: CUDA IPC opens only another process's memory.
  Allocation own = CreateOrDie(RandomBytes(4096, 4));
  absl::StatusOr<ResourceDescription> r = server_->GetResource({own.slice, 0, 4096});
  ASSERT_TRUE(r.ok()) << r.status();
  if (!r->ipc_handle.empty()) {
    s.ipc_handle = r->ipc_handle;
    absl::StatusOr<Allocation> a = server_->Import(s);
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << a.status();
  }
  ImportSource host;
  host.kind = ImportSource::Kind::kHost;
  refused(host, absl::StatusCode::kUnimplemented, "cuda backend");
  server_->Free(own.slice);
  EXPECT_EQ(server_->Usage().bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(ReadOrDie({CreateOrDie("still works").slice, 0, 11}), "still works");
}

// Note [Imported memory]: another process's allocation, imported through its IPC handle, is the
// same memory both ways; two imports of one allocation share the driver's mapping; freeing them
// leaves the producer's memory as the daemon last wrote it.
TEST_F(CudaServerTest, ImportsAnotherProcesssAllocationInPlace) {
  const std::string go = absl::StrCat(testing::TempDir(), "/cubed-import-go-", getpid());
  std::remove(go.c_str());
  const char* exporter = getenv("CUBED_CUDA_IPC_EXPORTER");  // Where the build tree moved.
  const std::string command =
      absl::StrCat(exporter != nullptr ? exporter : CUBED_CUDA_IPC_EXPORTER, " 4096 ", go, " 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char line[256] = {0};
  ASSERT_NE(fgets(line, sizeof(line), pipe), nullptr);
  const std::string handle = absl::HexStringToBytes(absl::StripAsciiWhitespace(line));
  if (handle.size() != 64) {
    std::fclose(std::fopen(go.c_str(), "w"));
    pclose(pipe);
    GTEST_SKIP() << "the exporter could not share memory: " << line;
  }
  std::string pattern(4096, '\0');
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<char>(i % 251);

  const MemoryUsage before = server_->Usage();
  ImportSource s;
  s.ipc_handle = handle;
  s.offset = 512;
  s.size = 1024;
  s.device_uuid = server_->Description().uuid;
  absl::StatusOr<Allocation> a = server_->Import(s);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(IsImportedSlice(a->slice));
  EXPECT_EQ(a->size, 1024u);
  absl::StatusOr<Allocation> b = server_->Import(s);  // The same range again: one mapping.
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(server_->Usage(), before);        // Not the pool's memory...
  EXPECT_EQ(server_->Imports().buffers, 2u);  // ...but shown beside it, each import counted.
  EXPECT_EQ(server_->Imports().bytes, 2048u);
  EXPECT_EQ(ReadOrDie({a->slice, 0, 1024}), pattern.substr(512, 1024));

  s.offset = uint64_t{1} << 30;  // Past the end of the exporter's allocation.
  absl::StatusOr<Allocation> past = server_->Import(s);
  EXPECT_EQ(past.status().code(), absl::StatusCode::kInvalidArgument) << past.status();
  EXPECT_THAT(std::string(past.status().message()), HasSubstr("exceeds"));

  const std::string hello = "hello";  // The daemon writes the producer's memory.
  absl::Status wrote = absl::UnknownError("not run");
  server_->Write(ResolvedTensor{{a->slice, 0, 1024}, {1024}, {1}, 1}, 10,
                 absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(hello.data()), 5),
                 [&](absl::Status st) { wrote = st; });
  ASSERT_TRUE(wrote.ok()) << wrote;
  ASSERT_TRUE(SyncNow(*server_).ok());
  server_->Free(a->slice);  // The other import still maps the memory...
  EXPECT_EQ(ReadOrDie({b->slice, 8, 8}), pattern.substr(520, 2) + hello + pattern.substr(527, 1));
  server_->Free(b->slice);  // ...until it goes too.
  EXPECT_EQ(server_->Imports().buffers, 0u);
  absl::StatusOr<std::vector<std::string>> gone = ReadAll(*server_, {{b->slice, 0, 8}});
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound) << gone.status();

  std::fclose(std::fopen(go.c_str(), "w"));  // The producer prints its memory and exits.
  std::string output;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), pipe)) output.append(buf, n);
  EXPECT_EQ(pclose(pipe), 0) << output;
  std::remove(go.c_str());
  std::string expect = pattern;
  expect.replace(522, 5, hello);
  EXPECT_EQ(output, absl::BytesToHexString(expect) + "\n");
}

}  // namespace
}  // namespace cubed

namespace cubed {
namespace {

// The CUDA backend against the ComputeServer conformance suite (skipped without a device).
INSTANTIATE_TEST_SUITE_P(Cuda, ComputeServerConformance,
                         testing::Values(ComputeServerFactory{
                             "cuda",
                             [](std::string* skip) -> std::unique_ptr<ComputeServer> {
                               CudaServerOptions options;
                               options.memory_limit = uint64_t{1} << 30;
                               absl::StatusOr<std::unique_ptr<CudaServer>> server =
                                   CudaServer::Create(options);
                               if (!server.ok()) {
                                 *skip = std::string(server.status().message());
                                 return nullptr;
                               }
                               return *std::move(server);
                             }}),
                         ComputeServerFactoryName);

}  // namespace
}  // namespace cubed
