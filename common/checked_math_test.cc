#include "common/checked_math.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace cubed {
namespace {

constexpr uint64_t kMax = ~uint64_t{0};

TEST(TensorBytesTest, MultipliesShapeAndElemSize) {
  EXPECT_EQ(*TensorBytes(std::vector<uint64_t>{2, 3, 4}, 4, "t"), 96u);
  EXPECT_EQ(*TensorBytes(std::vector<uint64_t>{}, 8, "t"), 8u);
  EXPECT_EQ(*TensorBytes(std::vector<uint64_t>{5, 0}, 4, "t"), 0u);
  EXPECT_EQ(*TensorBytes(std::vector<uint64_t>{uint64_t{1} << 61}, 4, "t"), uint64_t{1} << 63);
}

TEST(TensorBytesTest, OverflowIsAnErrorNamingTheField) {
  // 2^62 * 4 = 2^64: the product itself fits, the bytes do not.
  absl::StatusOr<uint64_t> bytes =
      TensorBytes(std::vector<uint64_t>{uint64_t{1} << 62}, 4, "bindings[3]");
  ASSERT_FALSE(bytes.ok());
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bytes.status().message().find("bindings[3]"), absl::string_view::npos);
  EXPECT_FALSE(TensorBytes(std::vector<uint64_t>{kMax, 2}, 1, "t").ok());
  EXPECT_FALSE(
      TensorBytes(std::vector<uint64_t>{uint64_t{1} << 32, uint64_t{1} << 32}, 1, "t").ok());
}

TEST(CheckedSumTest, AddsOrFails) {
  EXPECT_EQ(*CheckedSum(kMax - 1, 1, "total"), kMax);
  absl::StatusOr<uint64_t> sum = CheckedSum(kMax, 1, "total");
  ASSERT_FALSE(sum.ok());
  EXPECT_EQ(sum.status().code(), absl::StatusCode::kInvalidArgument);
  // The wrap the issue found: four tensors of 2^62 bytes.
  uint64_t total = 0;
  absl::Status failed;
  for (int i = 0; i < 4 && failed.ok(); ++i) {
    absl::StatusOr<uint64_t> next = CheckedSum(total, uint64_t{1} << 62, "total");
    if (next.ok()) {
      total = *next;
    } else {
      failed = next.status();
    }
  }
  EXPECT_FALSE(failed.ok());
}

TEST(CheckedMathTest, OptionalForms) {
  EXPECT_FALSE(CheckedAdd(kMax, 1).has_value());
  EXPECT_FALSE(CheckedMul(uint64_t{1} << 32, uint64_t{1} << 32).has_value());
  EXPECT_EQ(*CheckedRoundUp(65, 64), 128u);
  EXPECT_FALSE(CheckedRoundUp(kMax, 64).has_value());
}

}  // namespace
}  // namespace cubed
