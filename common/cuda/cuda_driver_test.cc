#include "common/cuda/cuda_driver.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "common/cuda/cuda_context.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/compute/cuda/cuda_test_util.h"

namespace cubed {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

// Loads `library` in a child process (so that nothing it does stays in this one) and prints the
// status.
void LoadInChildAndPrint(const char* library) {
  absl::StatusOr<CudaDriver> driver = OpenCudaDriver(library);
  std::fprintf(stderr, "status: %s\n", driver.status().ToString().c_str());
  std::_Exit(driver.ok() ? 1 : 0);
}

TEST(CudaDriverTest, MissingLibraryIsFailedPreconditionSayingSo) {
  EXPECT_EXIT(LoadInChildAndPrint("libcuda-not-here.so.1"), ::testing::ExitedWithCode(0),
              "FAILED_PRECONDITION: cannot load the CUDA driver library libcuda-not-here.so.1");
}

TEST(CudaDriverTest, StubLibraryIsFailedPreconditionSayingSo) {
  const std::string stub = CUBED_CUDA_STUB_LIBRARY;
  if (stub.empty() || access(stub.c_str(), R_OK) != 0) {
    GTEST_SKIP() << "the CUDA toolkit's stub libcuda.so is not installed";
  }
  EXPECT_EXIT(LoadInChildAndPrint(stub.c_str()), ::testing::ExitedWithCode(0),
              "FAILED_PRECONDITION: .*stub library, not a driver");
}

TEST(CudaDriverTest, CuStatusNamesTheCallTheErrorAndTheLine) {
  const absl::Status lost = CuStatus(CUDA_ERROR_ILLEGAL_ADDRESS, "cuFoo(x)", "foo.cc", 12);
  EXPECT_EQ(lost.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(lost.message(), HasSubstr("device lost: "));
  EXPECT_THAT(lost.message(), HasSubstr("cuFoo(x) at foo.cc:12"));
  // Named by the driver when one is loaded, by number otherwise.
  EXPECT_THAT(lost.message(),
              AnyOf(HasSubstr("CUDA_ERROR_ILLEGAL_ADDRESS"), HasSubstr("CUresult 700")));

  EXPECT_EQ(CuStatus(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc", "a.cc", 1).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(CuStatus(CUDA_ERROR_INVALID_VALUE, "cuMemcpy", "a.cc", 1).code(),
            absl::StatusCode::kInternal);
  EXPECT_TRUE(CuStatus(CUDA_SUCCESS, "cuInit", "a.cc", 1).ok());
}

TEST(CudaDriverTest, UuidsPrintAsNvidiaSmiDoes) {
  CUuuid uuid;
  for (int i = 0; i < 16; ++i) uuid.bytes[i] = static_cast<char>(i * 17);
  EXPECT_EQ(FormatGpuUuid(uuid), "GPU-00112233-4455-6677-8899-aabbccddeeff");
}

TEST(CudaDriverTest, StickyErrorsAreTheContextKillingOnes) {
  EXPECT_TRUE(IsStickyCudaError(CUDA_ERROR_ILLEGAL_ADDRESS));
  EXPECT_TRUE(IsStickyCudaError(CUDA_ERROR_LAUNCH_FAILED));
  EXPECT_TRUE(IsStickyCudaError(CUDA_ERROR_MISALIGNED_ADDRESS));
  EXPECT_FALSE(IsStickyCudaError(CUDA_ERROR_OUT_OF_MEMORY));
  EXPECT_FALSE(IsStickyCudaError(CUDA_ERROR_INVALID_PTX));
  EXPECT_FALSE(IsStickyCudaError(CUDA_ERROR_NOT_FOUND));
}

TEST(CudaDriverTest, AnOrdinalPastTheLastDeviceSaysHowManyThereAre) {
  CUBED_SKIP_WITHOUT_CUDA();
  absl::StatusOr<std::unique_ptr<CudaContext>> context = CudaContext::Retain(999);
  ASSERT_FALSE(context.ok());
  EXPECT_EQ(context.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(context.status().message(), HasSubstr("--device=999: this machine has"));
}

TEST(CudaDriverTest, PrimaryContextCanBeRetainedAndMadeCurrent) {
  CUBED_SKIP_WITHOUT_CUDA();
  absl::StatusOr<std::unique_ptr<CudaContext>> context = CudaContext::Retain(0);
  ASSERT_TRUE(context.ok()) << context.status();
  EXPECT_TRUE((*context)->MakeCurrent().ok());
  EXPECT_GE(Cu().version, 12000);
}

}  // namespace
}  // namespace cubed
