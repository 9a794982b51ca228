// BulkReadPlan: the pieces of a bulk read cover every element once, in dense order, each at most
// one chunk (or one element) and each one sub-tensor of its binding.

#include "server/channel/bulk_read_plan.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace cubed {
namespace {

TensorRef Tensor(std::vector<uint64_t> shape, std::vector<uint64_t> strides, uint32_t elem) {
  TensorRef t;
  t.binding.handle = HandleId(7);
  t.shape = std::move(shape);
  t.strides = std::move(strides);
  t.elem_size = elem;
  return t;
}

// Dense offsets of every element the pieces read, in element units of the tensor's layout.
std::vector<uint64_t> Plan(std::vector<TensorRef> tensors, uint64_t chunk,
                           std::vector<BulkPiece>* pieces) {
  absl::StatusOr<std::unique_ptr<BulkReadPlan>> plan = BulkReadPlan::Make(tensors, chunk);
  EXPECT_TRUE(plan.ok()) << plan.status();
  while (plan.ok() && !(*plan)->done()) pieces->push_back((*plan)->Next());
  return (*plan)->sizes();
}

TEST(BulkReadPlanTest, PiecesTileEachTensorInDenseOrder) {
  // 5 x 7 x 3 f32, row-major with padded rows (stride 32 instead of 21 for dim 0).
  const TensorRef t = Tensor({5, 7, 3}, {32, 3, 1}, 4);
  for (uint64_t chunk : {uint64_t{1}, uint64_t{4}, uint64_t{12}, uint64_t{13}, uint64_t{84},
                         uint64_t{100}, uint64_t{1} << 20}) {
    std::vector<BulkPiece> pieces;
    const std::vector<uint64_t> sizes = Plan({t}, chunk, &pieces);
    ASSERT_EQ(sizes, std::vector<uint64_t>{5 * 7 * 3 * 4});
    uint64_t offset = 0;
    for (const BulkPiece& p : pieces) {
      EXPECT_EQ(p.binding, 0u);
      EXPECT_EQ(p.offset, offset) << "chunk " << chunk;  // Contiguous, in order.
      EXPECT_TRUE(p.bytes <= chunk || p.bytes == 4) << "chunk " << chunk << ": " << p.bytes;
      uint64_t elements = 1;
      for (uint64_t s : p.ref.shape) elements *= s;
      EXPECT_EQ(elements * 4, p.bytes);
      // The piece's first element is the dense element `offset / 4` of the tensor.
      uint64_t dense = offset / 4, first = 0;
      for (size_t d = t.shape.size(); d-- > 0;) {
        first += (dense % t.shape[d]) * t.strides[d];
        dense /= t.shape[d];
      }
      EXPECT_EQ(p.ref.binding.offset_start, first * 4);
      EXPECT_EQ(p.ref.strides, t.strides);
      offset += p.bytes;
    }
    EXPECT_EQ(offset, sizes[0]) << "chunk " << chunk;
  }
}

TEST(BulkReadPlanTest, SeveralBindingsAndAnElementLargerThanTheChunk) {
  std::vector<BulkPiece> pieces;
  const std::vector<uint64_t> sizes =
      Plan({Tensor({3}, {1}, 16), Tensor({2, 2}, {2, 1}, 1)}, /*chunk=*/8, &pieces);
  EXPECT_EQ(sizes, (std::vector<uint64_t>{48, 4}));
  ASSERT_EQ(pieces.size(), 4u);  // Three 16-byte elements one by one, then the 4 bytes at once.
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(pieces[i].binding, 0u);
    EXPECT_EQ(pieces[i].bytes, 16u);
    EXPECT_EQ(pieces[i].offset, 16u * i);
  }
  EXPECT_EQ(pieces[3].binding, 1u);
  EXPECT_EQ(pieces[3].bytes, 4u);
  EXPECT_EQ(pieces[3].offset, 0u);
}

TEST(BulkReadPlanTest, StrideZeroRepeatsTheSameBytes) {
  std::vector<BulkPiece> pieces;
  Plan({Tensor({1000}, {0}, 4)}, /*chunk=*/400, &pieces);
  ASSERT_EQ(pieces.size(), 10u);
  for (const BulkPiece& p : pieces) {
    EXPECT_EQ(p.ref.binding.offset_start, 0u);  // Every piece starts at the one element.
    EXPECT_EQ(p.bytes, 400u);
  }
}

TEST(BulkReadPlanTest, SizesThatOverflowAreInvalidArgument) {
  absl::StatusOr<std::unique_ptr<BulkReadPlan>> plan =
      BulkReadPlan::Make({Tensor({uint64_t{1} << 62}, {0}, 4)}, 1 << 20);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cubed
