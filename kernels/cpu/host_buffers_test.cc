// RunBuiltinCpu's checks of the host memory it is given (host_buffers.h), which ValidateBuiltin
// cannot make from buffer sizes.

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/builtin.h"
#include "kernels/builtin_test_util.h"
#include "kernels/cpu/cpu_kernels.h"

namespace cubed::kernels::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(HostBuffersTest, MisalignedBufferIsRejectedAtRun) {
  std::vector<uint64_t> storage(8);
  uint8_t* base = reinterpret_cast<uint8_t*>(storage.data());
  BuiltinCall call = ContiguousCall("copy", ElemType::kF32, {{4}, {4}});
  const absl::Status st =
      RunBuiltinCpu(call, {HostBuffer{base + 2, 16}, HostBuffer{base + 32, 16}});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("buffer 0 (in)"), HasSubstr("aligned")));
}

TEST(HostBuffersTest, OutputOverlappingAnInputIsRejectedUnlessElementwiseInPlace) {
  std::vector<float> storage(64);
  uint8_t* base = reinterpret_cast<uint8_t*>(storage.data());
  const std::vector<std::vector<uint64_t>> s = {{4, 4}, {4, 4}, {4, 4}};
  BuiltinCall call = ContiguousCall("matmul", ElemType::kF32, s);
  absl::Status st =
      RunBuiltinCpu(call, {HostBuffer{base, 64}, HostBuffer{base + 64, 64}, HostBuffer{base, 64}});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("buffer 2 (out) overlaps buffer 0 (a)")));
  call.name = "add";
  EXPECT_TRUE(
      RunBuiltinCpu(call, {HostBuffer{base, 64}, HostBuffer{base + 64, 64}, HostBuffer{base, 64}})
          .ok());
  // Shifted by one element: not the same layout, so not in place.
  st = RunBuiltinCpu(call,
                     {HostBuffer{base, 64}, HostBuffer{base + 64, 64}, HostBuffer{base + 4, 64}});
  EXPECT_THAT(st.message(), HasSubstr("overlaps buffer 0 (lhs)"));
}

TEST(HostBuffersTest, EmptyTensorsAreANoOp) {
  const std::vector<std::vector<uint64_t>> s = {{0, 3}, {0, 3}};
  BuiltinCall call = ContiguousCall("exp", ElemType::kF32, s);
  EXPECT_TRUE(RunBuiltinCpu(call, {HostBuffer{nullptr, 0}, HostBuffer{nullptr, 0}}).ok());
}

}  // namespace
}  // namespace cubed::kernels::testing
