#include "client/tensor_launch.h"

#include <memory>

#include "client/handle_state.h"
#include "common/kernel_metadata.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cubed {
namespace {

// A tensor over a fake handle that is never released (no batcher).
Tensor FakeTensor(uint64_t id, std::vector<uint64_t> shape, std::vector<uint64_t> strides,
                  uint32_t elem_size, uint64_t bytes) {
  Tensor t;
  t.handle = Handle(std::make_shared<Handle::State>(id, bytes, nullptr));
  t.shape = std::move(shape);
  t.strides = std::move(strides);
  t.elem_size = elem_size;
  return t;
}

TEST(CubeCountFor, CoversEveryElement) {
  EXPECT_EQ(CubeCountFor(0).x, 1u);
  EXPECT_EQ(CubeCountFor(1).x, 1u);
  EXPECT_EQ(CubeCountFor(256).x, 1u);
  EXPECT_EQ(CubeCountFor(257).x, 2u);
  CubeCount big = CubeCountFor(uint64_t{1} << 40);
  EXPECT_LE(big.x, kMaxCubesPerDim);
  EXPECT_LE(big.y, kMaxCubesPerDim);
  EXPECT_GE(uint64_t{big.x} * big.y * big.z * kUnitsPerCube, uint64_t{1} << 40);
}

TEST(BuildTensorLaunch, MetadataDescribesInputsThenOutputs) {
  // A padded 2x3 f32 input (row stride 4, 32 bytes) and a dense 2x1 output.
  Tensor in = FakeTensor(11, {2, 3}, {4, 1}, 4, 32);
  Tensor out = FakeTensor(12, {2, 1}, {1, 1}, 4, 8);
  auto launch = BuildTensorLaunch({in}, {out});
  ASSERT_TRUE(launch.ok()) << launch.status();
  ASSERT_EQ(launch->bindings.buffers.size(), 2u);
  EXPECT_EQ(launch->bindings.buffers[0].handle.id(), 11u);
  EXPECT_EQ(launch->bindings.buffers[1].handle.id(), 12u);
  EXPECT_TRUE(launch->bindings.scalars.empty());  // Client::Execute passes its own.
  EXPECT_EQ(launch->count.x, 1u);

  auto meta = DecodeKernelMetadata(launch->bindings.metadata, 2, 2);
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_THAT(meta->buffer_len, ::testing::ElementsAre(8u, 2u));
  EXPECT_THAT(meta->logical_len, ::testing::ElementsAre(6u, 2u));
  EXPECT_EQ(meta->tensors[0].rank, 2u);
  EXPECT_EQ(meta->tensors[0].strides[0], 4u);
  EXPECT_EQ(meta->tensors[1].shape[0], 2u);
}

TEST(BuildTensorLaunch, RejectsBadTensors) {
  EXPECT_EQ(BuildTensorLaunch({}, {}).status().code(), absl::StatusCode::kInvalidArgument);
  Tensor empty;
  empty.shape = {1};
  empty.strides = {1};
  empty.elem_size = 4;
  EXPECT_EQ(BuildTensorLaunch({empty}, {}).status().code(), absl::StatusCode::kInvalidArgument);
  Tensor mismatched = FakeTensor(1, {2, 2}, {1}, 4, 16);
  EXPECT_EQ(BuildTensorLaunch({mismatched}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cubed
