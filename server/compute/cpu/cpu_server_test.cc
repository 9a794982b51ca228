// The CPU backend against the ComputeServer conformance suite.

#include "server/compute/cpu/cpu_server.h"

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/compute/compute_server_conformance.h"

namespace cubed {
namespace {

INSTANTIATE_TEST_SUITE_P(Cpu, ComputeServerConformance,
                         testing::Values(ComputeServerFactory{
                             "cpu",
                             [](std::string*) -> std::unique_ptr<ComputeServer> {
                               CpuServerOptions options;
                               options.memory_limit = uint64_t{256} << 20;
                               return std::make_unique<CpuServer>(options);
                             }}),
                         ComputeServerFactoryName);

// Note [Imported memory]: host bytes (a region's range, on the daemon) are used in place, kept
// alive by the slice, and never counted in the pools' usage.
TEST(CpuServerImport, HostBytesAreUsedInPlaceUntilFreed) {
  CpuServerOptions options;
  options.memory_limit = uint64_t{64} << 20;
  CpuServer server(options);
  auto memory = std::make_shared<std::vector<uint8_t>>(1024, 7);
  const std::weak_ptr<std::vector<uint8_t>> watch = memory;
  const MemoryUsage before = server.Usage();
  ImportSource source;
  source.kind = ImportSource::Kind::kHost;
  source.host_bytes = absl::MakeSpan(memory->data() + 16, 512);
  source.keep_alive = memory;
  absl::StatusOr<Allocation> a = server.Import(source);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(IsImportedSlice(a->slice));
  EXPECT_EQ(a->size, 512u);
  EXPECT_EQ(server.Usage(), before);
  EXPECT_EQ(server.Imports().buffers, 1u);  // Shown beside the usage instead.
  EXPECT_EQ(server.Imports().bytes, 512u);

  (*memory)[16 + 3] = 42;  // The producer writes: the slice sees it.
  std::vector<std::string> out;
  absl::Status read = absl::UnknownError("not run");
  server.Read({ResolvedBinding{a->slice, 0, 8}}, &out, [&](absl::Status s) { read = s; });
  ASSERT_TRUE(read.ok()) << read;
  EXPECT_EQ(out[0], std::string("\x07\x07\x07\x2a\x07\x07\x07\x07", 8));

  const std::string bytes = "abc";  // A write through the slice lands in the producer's memory.
  ResolvedTensor whole{ResolvedBinding{a->slice, 0, 512}, {512}, {1}, 1};
  absl::Status wrote = absl::UnknownError("not run");
  server.Write(whole, 100, absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(bytes.data()), 3),
               [&](absl::Status s) { wrote = s; });
  ASSERT_TRUE(wrote.ok()) << wrote;
  EXPECT_EQ(std::string(memory->begin() + 116, memory->begin() + 119), "abc");

  absl::StatusOr<ResourceDescription> r = server.GetResource(ResolvedBinding{a->slice, 8, 16});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->offset, 8u);
  EXPECT_EQ(r->size, 16u);

  memory.reset();
  source.keep_alive.reset();
  EXPECT_FALSE(watch.expired());  // The slice keeps the bytes mapped...
  server.Free(a->slice);
  EXPECT_TRUE(watch.expired());  // ...until it is freed, never into the pool.
  EXPECT_EQ(server.Usage(), before);
  EXPECT_EQ(server.Imports().buffers, 0u);
  EXPECT_EQ(server.Imports().bytes, 0u);
  server.Read({ResolvedBinding{a->slice, 0, 8}}, &out, [&](absl::Status s) { read = s; });
  EXPECT_EQ(read.code(), absl::StatusCode::kNotFound) << read;
}

TEST(CpuServerImport, CudaMemoryAndEmptyRangesAreRefused) {
  CpuServer server(CpuServerOptions{});
  ImportSource cuda;
  cuda.ipc_handle = std::string(64, '\0');
  cuda.size = 64;
  absl::StatusOr<Allocation> a = server.Import(cuda);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kUnimplemented) << a.status();
  EXPECT_THAT(std::string(a.status().message()), testing::HasSubstr("cpu backend"));
  ImportSource empty;
  empty.kind = ImportSource::Kind::kHost;
  a = server.Import(empty);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << a.status();
  EXPECT_THAT(std::string(a.status().message()), testing::HasSubstr("size 0"));
}

}  // namespace
}  // namespace cubed
