#include "storage/cuda/cuda_storage.h"

#include <memory>
#include <string>

#include "common/cuda/cuda_driver.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/compute/cuda/cuda_test_util.h"
#include "storage/compute_storage_conformance.h"
#include "storage/memory_manager.h"

namespace cubed {
namespace {

using ::testing::HasSubstr;

// A storage together with the context it needs.
struct ContextAndStorage {
  std::unique_ptr<CudaContext> context;
  std::unique_ptr<CudaStorage> storage;
};

std::shared_ptr<ContextAndStorage> MakeStorage() {
  auto both = std::make_shared<ContextAndStorage>();
  absl::StatusOr<std::unique_ptr<CudaContext>> context = CudaContext::Retain(0);
  if (!context.ok()) return nullptr;
  both->context = *std::move(context);
  CudaStorageOptions options;
  options.context = both->context.get();
  both->storage = std::make_unique<CudaStorage>(std::move(options));
  return both;
}

// The conformance suite runs only where there is a device (no instances elsewhere).
std::vector<ComputeStorageFactory> Factories() {
  if (!testing_cuda::CudaDevicePresent()) return {};
  return {ComputeStorageFactory{"Cuda", []() -> std::shared_ptr<ComputeStorage> {
                                  std::shared_ptr<ContextAndStorage> both = MakeStorage();
                                  return std::shared_ptr<ComputeStorage>(both, both->storage.get());
                                }}};
}
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ComputeStorageConformance);
INSTANTIATE_TEST_SUITE_P(Cuda, ComputeStorageConformance, ::testing::ValuesIn(Factories()),
                         ComputeStorageFactoryName);

uint64_t FreeDeviceBytes() {
  size_t free = 0, total = 0;
  EXPECT_EQ(Cu().MemGetInfo(&free, &total), CUDA_SUCCESS);
  return free;
}

TEST(CudaStorageTest, CleanupReallyReturnsMemoryToTheDevice) {
  CUBED_SKIP_WITHOUT_CUDA();
  std::shared_ptr<ContextAndStorage> s = MakeStorage();
  ASSERT_NE(s, nullptr);
  MemoryManager memory(s->storage.get(), MemoryManagerOptions{});
  constexpr uint64_t kBytes = uint64_t{512} << 20;
  const uint64_t before = FreeDeviceBytes();
  absl::StatusOr<Reservation> reserved = memory.Reserve(kBytes, kFirstSessionOwner);
  ASSERT_TRUE(reserved.ok()) << reserved.status();
  EXPECT_TRUE(reserved->dirty) << "cuMemAlloc promises no zeroed memory";
  EXPECT_LE(FreeDeviceBytes(), before - kBytes);
  memory.Free(reserved->slice);
  memory.Cleanup();
  EXPECT_EQ(s->storage->allocation_count(), 0u);
  // Other processes may use the device too: allow 64 MiB of drift.
  EXPECT_GE(FreeDeviceBytes() + (uint64_t{64} << 20), before);
}

// Note [Owner-tagged memory] (storage/memory_manager.cc): with a stream, every new allocation is
// zeroed on it, also when the driver hands back memory this process just freed.
TEST(CudaStorageTest, NewAllocationsAreZeroedOnTheStream) {
  CUBED_SKIP_WITHOUT_CUDA();
  std::shared_ptr<ContextAndStorage> plain = MakeStorage();
  ASSERT_NE(plain, nullptr);
  EXPECT_FALSE(plain->storage->capabilities().zeroes_new_allocations);
  ASSERT_TRUE(plain->context->MakeCurrent().ok());
  CUstream stream = nullptr;
  ASSERT_EQ(Cu().StreamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  {
    CudaStorageOptions options;
    options.context = plain->context.get();
    options.stream = stream;
    CudaStorage storage(std::move(options));
    EXPECT_TRUE(storage.capabilities().zeroes_new_allocations);
    for (uint64_t size : {uint64_t{1}, uint64_t{1001}, uint64_t{8} << 20, uint64_t{8} << 20}) {
      absl::StatusOr<StorageId> id = storage.Alloc(size);
      ASSERT_TRUE(id.ok()) << id.status();
      const CUdeviceptr ptr = storage.Resource(*id)->device_ptr;
      std::string bytes(size, 'x');
      ASSERT_EQ(Cu().MemcpyDtoHAsync(bytes.data(), ptr, size, stream), CUDA_SUCCESS);
      ASSERT_EQ(Cu().StreamSynchronize(stream), CUDA_SUCCESS);
      EXPECT_EQ(bytes, std::string(size, '\0')) << size;
      ASSERT_EQ(Cu().MemsetD8Async(ptr, 0xab, size, stream), CUDA_SUCCESS);  // For the next one.
      storage.Dealloc(*id);
    }
  }
  EXPECT_EQ(Cu().StreamDestroy(stream), CUDA_SUCCESS);
}

TEST(CudaStorageTest, MoreThanTheDeviceHoldsIsResourceExhausted) {
  CUBED_SKIP_WITHOUT_CUDA();
  std::shared_ptr<ContextAndStorage> s = MakeStorage();
  ASSERT_NE(s, nullptr);
  size_t free = 0, total = 0;
  ASSERT_EQ(Cu().MemGetInfo(&free, &total), CUDA_SUCCESS);
  absl::StatusOr<StorageId> id = s->storage->Alloc(uint64_t{total} * 2);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(id.status().message(), HasSubstr("out of device memory"));
  EXPECT_EQ(s->storage->bytes_allocated(), 0u);
}

TEST(CudaStorageTest, IpcHandleIsStableAnd64Bytes) {
  CUBED_SKIP_WITHOUT_CUDA();
  std::shared_ptr<ContextAndStorage> s = MakeStorage();
  ASSERT_NE(s, nullptr);
  absl::StatusOr<StorageId> id = s->storage->Alloc(1 << 20);
  ASSERT_TRUE(id.ok());
  absl::StatusOr<std::string> a = s->storage->IpcHandle(*id);
  if (absl::IsUnimplemented(a.status())) GTEST_SKIP() << a.status();
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->size(), 64u);
  EXPECT_EQ(*s->storage->IpcHandle(*id), *a);
  EXPECT_TRUE(absl::IsNotFound(s->storage->IpcHandle(*id + 100).status()));
}

}  // namespace
}  // namespace cubed
