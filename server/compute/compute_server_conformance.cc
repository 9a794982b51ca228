#include "server/compute/compute_server_conformance.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/kernel_metadata.h"

namespace cubed {

std::string ComputeServerFactoryName(const testing::TestParamInfo<ComputeServerFactory>& info) {
  return info.param.name;
}

void ComputeServerConformance::SetUp() {
  std::string skip;
  server_ = GetParam().make(&skip);
  if (server_ == nullptr) GTEST_SKIP() << GetParam().name << " backend not here: " << skip;
}

void ComputeServerConformance::TearDown() { server_.reset(); }

namespace {

constexpr MemoryOwner kOwnerA = kFirstSessionOwner;
constexpr MemoryOwner kOwnerB = kFirstSessionOwner + 1;

absl::Span<const uint8_t> Bytes(const std::string& s) {
  return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

std::string Pattern(size_t size, int seed) {
  std::string s(size, '\0');
  for (size_t i = 0; i < size; ++i) s[i] = static_cast<char>((i * 131 + seed * 7 + 1) & 0xff);
  return s;
}

// Waits for a completion callback (backends may finish on another thread).
class Done {
 public:
  DoneCallback callback() {
    return [this](absl::Status s) {
      status_ = std::move(s);
      done_.Notify();
    };
  }
  absl::Status Wait() {
    if (!done_.WaitForNotificationWithTimeout(absl::Seconds(30))) {
      return absl::DeadlineExceededError("the completion never ran");
    }
    return status_;
  }

 private:
  absl::Notification done_;
  absl::Status status_;
};

ResolvedBinding Whole(const Allocation& a) { return ResolvedBinding{a.slice, 0, a.size}; }

absl::StatusOr<std::string> ReadAll(ComputeServer& server, ResolvedBinding binding) {
  std::vector<std::string> out;
  Done done;
  server.Read({binding}, &out, done.callback());
  if (absl::Status s = done.Wait(); !s.ok()) return s;
  if (out.size() != 1) return absl::InternalError("Read returned no entry");
  return out[0];
}

TEST_P(ComputeServerConformance, DescriptionIsComplete) {
  const DeviceDescription& d = server_->Description();
  EXPECT_FALSE(d.name.empty());
  EXPECT_GT(d.memory_limit, 0u);
  EXPECT_GT(d.alignment, 0u);
  EXPECT_EQ(d.alignment & (d.alignment - 1), 0u) << "alignment " << d.alignment;
  EXPECT_LE(d.max_allocation, d.memory_limit);
  for (int i = 0; i < 3; ++i) EXPECT_GT(d.max_cube_count[i], 0u);
  EXPECT_FALSE(d.elem_types.empty());
  EXPECT_FALSE(d.builtin_kernels.empty());
}

TEST_P(ComputeServerConformance, CreateThenReadReturnsTheBytes) {
  for (size_t size :
       {size_t{1}, size_t{63}, size_t{4096}, size_t{1} << 20, (size_t{3} << 20) + 5}) {
    const std::string data = Pattern(size, 1);
    absl::StatusOr<Allocation> a = server_->Create(Bytes(data), kOwnerA);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->size, size);
    absl::StatusOr<std::string> got = ReadAll(*server_, Whole(*a));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(*got == data) << "size " << size;
    // A view: offset 1, one byte cut from the end.
    if (size > 2) {
      got = ReadAll(*server_, ResolvedBinding{a->slice, 1, size - 2});
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_TRUE(*got == data.substr(1, size - 2));
    }
    server_->Free(a->slice);
  }
}

TEST_P(ComputeServerConformance, EmptyOfAnotherOwnerIsZeroed) {
  const std::string secret = Pattern(1 << 16, 9);
  absl::StatusOr<Allocation> a = server_->Create(Bytes(secret), kOwnerA);
  ASSERT_TRUE(a.ok()) << a.status();
  server_->Free(a->slice);
  absl::StatusOr<Allocation> b = server_->Empty(secret.size(), kOwnerB);
  ASSERT_TRUE(b.ok()) << b.status();
  absl::StatusOr<std::string> got = ReadAll(*server_, Whole(*b));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, std::string(secret.size(), '\0')) << "another owner's freed bytes are visible";
  server_->Free(b->slice);
}

TEST_P(ComputeServerConformance, CreateTensorThenReadTensorPacksDensely) {
  const std::vector<uint64_t> shape = {3, 1000};  // 4000-byte rows: pitched on some backends.
  const std::string data = Pattern(3 * 1000 * 4, 2);
  absl::StatusOr<Allocation> a = server_->CreateTensor(Bytes(data), shape, 4, kOwnerA);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->strides.size(), 2u);
  EXPECT_EQ(a->strides[1], 1u);
  EXPECT_GE(a->strides[0], 1000u);
  EXPECT_GE(a->size, data.size());
  std::vector<std::string> out;
  Done done;
  server_->ReadTensor({ResolvedTensor{Whole(*a), shape, a->strides, 4}}, &out, done.callback());
  ASSERT_TRUE(done.Wait().ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0] == data);
  // A transposed view (strides swapped) reads column-major order.
  out.clear();
  Done transposed;
  server_->ReadTensor({ResolvedTensor{Whole(*a), {1000, 3}, {1, a->strides[0]}, 4}}, &out,
                      transposed.callback());
  ASSERT_TRUE(transposed.Wait().ok());
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].size(), data.size());
  EXPECT_EQ(out[0].substr(4, 4), data.substr(1000 * 4, 4));  // [0][1] = row 1, column 0.
  server_->Free(a->slice);
}

// Note [Shared-memory regions] (server/channel/shared_region.h): reads land in host memory the
// caller keeps (a region), and host memory may be registered with the backend first.
TEST_P(ComputeServerConformance, ReadTensorIntoHostMemoryPacksInPlace) {
  std::string host(2 * 3 * 1000 * 4 + 16, '\0');
  const auto memory = absl::MakeSpan(reinterpret_cast<uint8_t*>(host.data()), host.size());
  ASSERT_TRUE(server_->RegisterHostMemory(memory).ok());
  const std::vector<uint64_t> shape = {3, 1000};
  const std::string data = Pattern(3 * 1000 * 4, 5);
  absl::StatusOr<Allocation> a = server_->CreateTensor(Bytes(data), shape, 4, kOwnerA);
  ASSERT_TRUE(a.ok()) << a.status();
  Done done;
  server_->ReadTensorInto(
      {ResolvedTensor{Whole(*a), shape, a->strides, 4},
       ResolvedTensor{Whole(*a), {1000, 3}, {1, a->strides[0]}, 4}},
      {memory.subspan(8, data.size()), memory.subspan(8 + data.size(), data.size())},
      done.callback());
  ASSERT_TRUE(done.Wait().ok());
  EXPECT_TRUE(host.substr(8, data.size()) == data);
  EXPECT_EQ(host.substr(8 + data.size() + 4, 4), data.substr(1000 * 4, 4));  // Transposed [0][1].
  EXPECT_EQ(host.substr(0, 8), std::string(8, '\0')) << "bytes before the destination changed";
  EXPECT_EQ(host.substr(8 + 2 * data.size()), std::string(8, '\0')) << "bytes after it changed";
  server_->Free(a->slice);
  Done synced;
  server_->Sync(synced.callback());
  ASSERT_TRUE(synced.Wait().ok());
  server_->UnregisterHostMemory(memory);

  // Large enough that the copy takes a while: `done` must wait for the bytes, not for the
  // queueing (registered memory is copied by DMA, asynchronously).
  const std::string big = Pattern(64 << 20, 9);
  std::string landing(big.size(), '\0');
  const auto into = absl::MakeSpan(reinterpret_cast<uint8_t*>(landing.data()), landing.size());
  ASSERT_TRUE(server_->RegisterHostMemory(into).ok());
  absl::StatusOr<Allocation> b = server_->Create(Bytes(big), kOwnerA);
  ASSERT_TRUE(b.ok()) << b.status();
  Done read;
  server_->ReadTensorInto({ResolvedTensor{Whole(*b), {big.size()}, {1}, 1}}, {into},
                          read.callback());
  ASSERT_TRUE(read.Wait().ok());
  // The tail first, at once: a copy still running would not have reached it (a full compare
  // from the front could trail behind the copy and see every byte arrive).
  EXPECT_TRUE(landing.substr(landing.size() - 4096) == big.substr(big.size() - 4096))
      << "ReadTensorInto completed before its bytes landed";
  EXPECT_TRUE(landing == big);
  server_->Free(b->slice);
  server_->UnregisterHostMemory(into);
}

TEST_P(ComputeServerConformance, WriteLandsAtItsDenseOffset) {
  absl::StatusOr<Allocation> a = server_->Empty(10000, kOwnerA);
  ASSERT_TRUE(a.ok()) << a.status();
  const std::string piece = Pattern(3000, 4);
  Done written;
  server_->Write(ResolvedTensor{Whole(*a), {10000}, {1}, 1}, 5000, Bytes(piece),
                 written.callback());
  ASSERT_TRUE(written.Wait().ok());
  absl::StatusOr<std::string> got = ReadAll(*server_, ResolvedBinding{a->slice, 5000, 3000});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == piece);
  server_->Free(a->slice);
}

// Note [Copies between devices] (server/channel/device.h): one device's copy, in stream order.
TEST_P(ComputeServerConformance, CopyWithinCopiesTheRangeInStreamOrder) {
  const std::string data = Pattern((size_t{5} << 20) + 3, 6);
  absl::StatusOr<Allocation> a = server_->Create(Bytes(data), kOwnerA);
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<Allocation> b = server_->Empty(data.size() + 64, kOwnerB);
  ASSERT_TRUE(b.ok()) << b.status();
  // Queued after the create and before the read, with no sync between: stream order alone.
  ASSERT_TRUE(server_
                  ->CopyWithin(ResolvedBinding{a->slice, 3, data.size() - 3},
                               ResolvedBinding{b->slice, 64, data.size() - 3})
                  .ok());
  absl::StatusOr<std::string> got =
      ReadAll(*server_, ResolvedBinding{b->slice, 64, data.size() - 3});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == data.substr(3));
  // Unequal sizes are a caller's bug.
  EXPECT_EQ(
      server_->CopyWithin(ResolvedBinding{a->slice, 0, 8}, ResolvedBinding{b->slice, 0, 9}).code(),
      absl::StatusCode::kInternal);
  server_->Free(a->slice);
  server_->Free(b->slice);
}

TEST_P(ComputeServerConformance, UsageCountsEveryAllocationAndFreeGivesItBack) {
  const MemoryUsage before = server_->Usage();
  std::vector<SliceId> slices;
  for (uint64_t size : {uint64_t{100}, uint64_t{1} << 20, uint64_t{20} << 20}) {
    absl::StatusOr<Allocation> a = server_->Empty(size, kOwnerA);
    ASSERT_TRUE(a.ok()) << a.status();
    slices.push_back(a->slice);
  }
  MemoryUsage during = server_->Usage();
  EXPECT_EQ(during.number_allocs, before.number_allocs + 3);
  EXPECT_EQ(during.bytes_in_use, before.bytes_in_use + 100 + (1 << 20) + (20 << 20));
  EXPECT_GE(during.bytes_reserved, during.bytes_in_use + during.bytes_padding);
  for (SliceId s : slices) server_->Free(s);
  const MemoryUsage after = server_->Usage();
  EXPECT_EQ(after.number_allocs, before.number_allocs);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  server_->Cleanup();
  EXPECT_EQ(server_->Usage().bytes_reserved, 0u) << "Cleanup keeps free pages";
}

TEST_P(ComputeServerConformance, BadSizesAreRefusedAndLeaveNothing) {
  const MemoryUsage before = server_->Usage();
  EXPECT_EQ(server_->Empty(0, kOwnerA).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(server_->Empty(server_->Description().memory_limit + 1, kOwnerA).status().code(),
            absl::StatusCode::kResourceExhausted);
  const std::vector<uint64_t> huge = {uint64_t{1} << 40, uint64_t{1} << 30};
  EXPECT_FALSE(server_->EmptyTensor(huge, 4, kOwnerA).ok());
  const MemoryUsage after = server_->Usage();
  EXPECT_EQ(after.number_allocs, before.number_allocs);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(after.bytes_reserved, before.bytes_reserved);
}

// Sizes that cross a checkpoint batch (16 MiB on both backends) and fall inside one.
const std::vector<uint64_t>& CheckpointSizes() {
  static const std::vector<uint64_t> sizes = {1, 4096, (uint64_t{17} << 20) + 3, 100, 1 << 20};
  return sizes;
}

// Gathers what ReadToHost hands out, checking that chunks come in order.
struct Gathered {
  std::vector<std::string> bytes;
  size_t last_count = 0;
  absl::Status Take(absl::Span<const HostChunk> chunks) {
    for (const HostChunk& c : chunks) {
      if (c.offset == 0) bytes.emplace_back();
      if (c.index + 1 != bytes.size() || c.offset != bytes.back().size() || c.bytes.empty()) {
        return absl::InternalError("chunk out of order");
      }
      bytes.back().append(reinterpret_cast<const char*>(c.bytes.data()), c.bytes.size());
      last_count += c.last ? 1 : 0;
    }
    return absl::OkStatus();
  }
};

TEST_P(ComputeServerConformance, ReadToHostHandsOutEveryByteInOrder) {
  std::vector<std::string> data;
  std::vector<ResolvedBinding> bindings;
  for (size_t i = 0; i < CheckpointSizes().size(); ++i) {
    data.push_back(Pattern(CheckpointSizes()[i], static_cast<int>(i)));
    absl::StatusOr<Allocation> a = server_->Create(Bytes(data.back()), kOwnerA);
    ASSERT_TRUE(a.ok()) << a.status();
    bindings.push_back(Whole(*a));
  }
  Gathered got;
  absl::Status s = server_->ReadToHost(
      bindings, [&got](absl::Span<const HostChunk> chunks) { return got.Take(chunks); });
  if (s.code() == absl::StatusCode::kUnimplemented) GTEST_SKIP() << s;
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(got.bytes.size(), data.size());
  EXPECT_EQ(got.last_count, data.size());
  for (size_t i = 0; i < data.size(); ++i) EXPECT_TRUE(got.bytes[i] == data[i]) << "binding " << i;
  // The sink's error stops the transfer and is returned.
  int calls = 0;
  s = server_->ReadToHost(bindings, [&calls](absl::Span<const HostChunk>) {
    ++calls;
    return absl::DataLossError("sink refuses");
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_EQ(calls, 1);
  for (const ResolvedBinding& b : bindings) server_->Free(b.slice);
}

TEST_P(ComputeServerConformance, CreateFromHostHoldsWhatTheFillWrote) {
  const MemoryUsage before = server_->Usage();
  std::vector<std::string> data;
  for (size_t i = 0; i < CheckpointSizes().size(); ++i) {
    data.push_back(Pattern(CheckpointSizes()[i], static_cast<int>(i) + 20));
  }
  absl::StatusOr<std::vector<Allocation>> made = server_->CreateFromHost(
      CheckpointSizes(), kOwnerA, [&data](absl::Span<const HostChunk> chunks) {
        for (const HostChunk& c : chunks) {
          std::memcpy(c.bytes.data(), data[c.index].data() + c.offset, c.bytes.size());
        }
        return absl::OkStatus();
      });
  if (made.status().code() == absl::StatusCode::kUnimplemented) GTEST_SKIP() << made.status();
  ASSERT_TRUE(made.ok()) << made.status();
  ASSERT_EQ(made->size(), data.size());
  for (size_t i = 0; i < data.size(); ++i) {
    EXPECT_EQ((*made)[i].size, data[i].size());
    absl::StatusOr<std::string> got = ReadAll(*server_, Whole((*made)[i]));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(*got == data[i]) << "allocation " << i;
    server_->Free((*made)[i].slice);
  }
  // A failing fill leaves nothing allocated.
  int calls = 0;
  made = server_->CreateFromHost(CheckpointSizes(), kOwnerA, [&calls](absl::Span<const HostChunk>) {
    return ++calls == 2 ? absl::DataLossError("bad bytes") : absl::OkStatus();
  });
  EXPECT_EQ(made.status().code(), absl::StatusCode::kDataLoss) << made.status();
  const MemoryUsage after = server_->Usage();
  EXPECT_EQ(after.number_allocs, before.number_allocs);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
}

TEST_P(ComputeServerConformance, ExecuteAddThenSyncThenRead) {
  constexpr uint64_t n = 1000;
  std::vector<float> x(n), y(n);
  for (uint64_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i);
    y[i] = 0.5f * static_cast<float>(i);
  }
  auto bytes = [](const std::vector<float>& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  };
  const std::string xs = bytes(x), ys = bytes(y);
  absl::StatusOr<Allocation> a = server_->Create(Bytes(xs), kOwnerA);
  absl::StatusOr<Allocation> b = server_->Create(Bytes(ys), kOwnerA);
  absl::StatusOr<Allocation> out = server_->Empty(n * 4, kOwnerA);
  ASSERT_TRUE(a.ok() && b.ok() && out.ok());
  Launch launch;
  launch.kernel.builtin.name = "add";
  launch.kernel.builtin.dtype = ElemType::kF32;
  launch.kernel.builtin.out_dtype = ElemType::kF32;
  const TensorLayout layout = TensorLayout::Contiguous({n});
  absl::StatusOr<std::vector<uint32_t>> metadata =
      EncodeKernelMetadata({n, n, n}, {layout, layout, layout});
  ASSERT_TRUE(metadata.ok()) << metadata.status();
  launch.kernel.builtin.metadata = kernels::ToMetadataWords(*metadata);
  launch.count.x = (n + 255) / 256;
  launch.buffers = {Whole(*a), Whole(*b), Whole(*out)};
  ASSERT_TRUE(server_->Execute(std::move(launch)).ok());
  ASSERT_TRUE(server_->Flush().ok());
  Done synced;
  server_->Sync(synced.callback());
  ASSERT_TRUE(synced.Wait().ok());
  absl::StatusOr<std::string> got = ReadAll(*server_, Whole(*out));
  ASSERT_TRUE(got.ok()) << got.status();
  std::vector<float> sum(n);
  std::memcpy(sum.data(), got->data(), n * 4);
  for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(sum[i], 1.5f * static_cast<float>(i)) << i;
  for (const Allocation* s : {&*a, &*b, &*out}) server_->Free(s->slice);
}

TEST_P(ComputeServerConformance, ExecuteOfAnUnknownKernelIsNotFoundAndRunsNothing) {
  absl::StatusOr<Allocation> out = server_->Empty(16, kOwnerA);
  ASSERT_TRUE(out.ok());
  Launch launch;
  launch.kernel.builtin.name = "no_such_kernel";
  launch.kernel.builtin.dtype = ElemType::kF32;
  launch.kernel.builtin.out_dtype = ElemType::kF32;
  launch.buffers = {Whole(*out)};
  EXPECT_EQ(server_->Execute(std::move(launch)).code(), absl::StatusCode::kNotFound);
  server_->Free(out->slice);
}

TEST_P(ComputeServerConformance, ProfileMeasuresTheWorkBetween) {
  absl::StatusOr<ProfileToken> token = server_->StartProfile();
  ASSERT_TRUE(token.ok()) << token.status();
  const std::string data = Pattern(1 << 20, 5);
  absl::StatusOr<Allocation> a = server_->Create(Bytes(data), kOwnerA);
  ASSERT_TRUE(a.ok());
  absl::Notification ended;
  absl::StatusOr<absl::Duration> elapsed = absl::UnknownError("not called");
  server_->EndProfile(*token, [&](absl::StatusOr<absl::Duration> d) {
    elapsed = std::move(d);
    ended.Notify();
  });
  ASSERT_TRUE(ended.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_TRUE(elapsed.ok()) << elapsed.status();
  EXPECT_GE(*elapsed, absl::ZeroDuration());
  server_->Free(a->slice);
}

TEST_P(ComputeServerConformance, GetResourceDescribesTheView) {
  absl::StatusOr<Allocation> a = server_->Empty(4096, kOwnerA);
  ASSERT_TRUE(a.ok());
  absl::StatusOr<ResourceDescription> r = server_->GetResource(ResolvedBinding{a->slice, 64, 128});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->size, 128u);
  absl::StatusOr<ResourceDescription> whole = server_->GetResource(Whole(*a));
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(r->storage_id, whole->storage_id);
  EXPECT_EQ(r->offset, whole->offset + 64);
  server_->Free(a->slice);
}

}  // namespace
}  // namespace cubed
