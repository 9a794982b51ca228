#include "server/compute/cuda/cuda_transfer.h"

#include <cstring>
#include <numeric>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cubed {
namespace {

using ::testing::ElementsAre;

struct Layout {
  std::vector<uint64_t> shape;
  std::vector<uint64_t> strides;
  uint64_t elem = 4;
};

// Every element's bytes in row-major order, the slow obvious way.
std::string NaivePack(const std::string& src, const Layout& t) {
  std::string out;
  uint64_t count = 1;
  for (uint64_t s : t.shape) count *= s;
  for (uint64_t linear = 0; linear < count; ++linear) {
    uint64_t rest = linear, offset = 0;
    for (size_t d = t.shape.size(); d-- > 0;) {
      offset += (rest % t.shape[d]) * t.strides[d];
      rest /= t.shape[d];
    }
    out.append(src, offset * t.elem, t.elem);
  }
  return out;
}

// Runs a plan the way cuMemcpy2D would, from the strided side to the dense side.
std::string RunPlan(const std::string& src, const std::vector<CopyPiece>& pieces,
                    uint64_t dense_bytes) {
  std::string out(dense_bytes, '\0');
  for (const CopyPiece& p : pieces) {
    for (uint64_t r = 0; r < p.height; ++r) {
      std::memcpy(out.data() + p.dense_offset + r * p.width,
                  src.data() + p.strided_offset + r * p.pitch, p.width);
    }
  }
  return out;
}

std::string Pattern(uint64_t bytes) {
  std::string s(bytes, '\0');
  for (uint64_t i = 0; i < bytes; ++i) s[i] = static_cast<char>(i * 7 + 3);
  return s;
}

uint64_t DenseBytes(const Layout& t) {
  uint64_t n = t.elem;
  for (uint64_t s : t.shape) n *= s;
  return n;
}

class TensorCopyTest : public ::testing::TestWithParam<Layout> {};

TEST_P(TensorCopyTest, PlanAndHostPackGiveTheDenseRowMajorBytes) {
  const Layout& t = GetParam();
  const std::string src = Pattern(TensorSpanBytes(t.shape, t.strides, t.elem) + 64);
  const std::string want = NaivePack(src, t);

  std::string packed(DenseBytes(t), '\0');
  PackTensorOnHost(reinterpret_cast<const uint8_t*>(src.data()), t.shape, t.strides, t.elem,
                   reinterpret_cast<uint8_t*>(packed.data()));
  EXPECT_EQ(packed, want);

  for (uint64_t max_piece : {uint64_t{8}, uint64_t{24}, uint64_t{1} << 20}) {
    CopyPlanLimits limits;
    limits.max_piece_bytes = max_piece;
    limits.max_pieces = 1 << 20;
    std::optional<std::vector<CopyPiece>> plan = PlanTensorCopy(t.shape, t.strides, t.elem, limits);
    if (!plan) continue;  // Host fallback; checked above.
    uint64_t dense = 0;
    for (const CopyPiece& p : *plan) {
      EXPECT_LE(p.bytes(), std::max(max_piece, t.elem)) << "piece too big";
      EXPECT_EQ(p.dense_offset, dense) << "pieces must come in dense order";
      if (p.height > 1) {
        EXPECT_GE(p.pitch, p.width);
      }
      dense += p.bytes();
    }
    EXPECT_EQ(dense, DenseBytes(t));
    EXPECT_EQ(RunPlan(src, *plan, DenseBytes(t)), want) << "max_piece " << max_piece;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, TensorCopyTest,
    ::testing::Values(Layout{{4, 5, 6}, {30, 6, 1}},          // Contiguous.
                      Layout{{3, 7}, {9, 1}},                 // Pitched rows.
                      Layout{{2, 3, 7}, {27, 9, 1}},          // Pitched, batched.
                      Layout{{2, 3, 7}, {40, 9, 1}},          // Pitched, gap between batches.
                      Layout{{5, 4}, {1, 5}},                 // Transposed.
                      Layout{{3, 4}, {12, 2}},                // Stepped.
                      Layout{{3, 4}, {0, 1}},                 // Broadcast rows: host fallback.
                      Layout{{3, 1, 4}, {4, 99, 1}},          // Size-1 dim with any stride.
                      Layout{{1}, {1}, 8},                    // One element.
                      Layout{{}, {}, 8},                      // Rank 0.
                      Layout{{6}, {3}, 2},                    // Strided vector.
                      Layout{{2, 2, 2, 3}, {30, 1, 2, 6}}));  // Permuted.

TEST(TensorCopyPlanTest, EmptyTensorHasNoPieces) {
  std::optional<std::vector<CopyPiece>> plan = PlanTensorCopy({3, 0}, {1, 1}, 4, {});
  ASSERT_TRUE(plan.has_value());
  EXPECT_TRUE(plan->empty());
}

TEST(TensorCopyPlanTest, PitchedTensorIsOne2DCopy) {
  std::optional<std::vector<CopyPiece>> plan = PlanTensorCopy({4, 3, 1000}, {3072, 1024, 1}, 4, {});
  ASSERT_TRUE(plan.has_value());
  ASSERT_EQ(plan->size(), 1u);
  EXPECT_EQ((*plan)[0].width, 4000u);
  EXPECT_EQ((*plan)[0].pitch, 4096u);
  EXPECT_EQ((*plan)[0].height, 12u);
}

TEST(TensorCopyPlanTest, TooManyCopiesOrOverlongPitchFallBackToTheHost) {
  CopyPlanLimits limits;
  limits.max_pieces = 4;
  EXPECT_FALSE(PlanTensorCopy({5, 4}, {1, 5}, 4, limits).has_value());  // 5 column copies.
  limits.max_pieces = 4096;
  limits.max_pitch = 64;
  EXPECT_FALSE(PlanTensorCopy({3, 4}, {100, 1}, 4, limits).has_value());
}

TEST(TensorCopyPlanTest, ContiguousCopyIsCutIntoChunks) {
  const std::vector<CopyPiece> pieces = PlanContiguousCopy(40, 16);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[2].strided_offset, 32u);
  EXPECT_EQ(pieces[2].bytes(), 8u);
  EXPECT_TRUE(PlanContiguousCopy(0, 16).empty());
}

TEST(PitchedTensorLayoutTest, RowsArePaddedTo256Bytes) {
  std::optional<TensorAllocation> a = PitchedTensorLayout({2, 3, 1000}, 4, 256);
  ASSERT_TRUE(a.has_value());
  EXPECT_THAT(a->strides, ElementsAre(3 * 1024, 1024, 1));
  EXPECT_EQ(a->bytes, 6u * 4096);
}

TEST(PitchedTensorLayoutTest, StaysContiguousWhenPaddingWouldNotPay) {
  // Rank 1; already aligned rows; padding above a quarter of the row (100 f32 = 400 -> 512).
  for (const std::vector<uint64_t>& shape :
       {std::vector<uint64_t>{1000}, std::vector<uint64_t>{3, 64}, std::vector<uint64_t>{3, 100}}) {
    std::optional<TensorAllocation> a = PitchedTensorLayout(shape, 4, 256);
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(a->strides.back(), 1u);
    EXPECT_EQ(a->bytes, 4 * std::accumulate(shape.begin(), shape.end(), uint64_t{1},
                                            std::multiplies<uint64_t>()));
  }
  // A pitch that is not a multiple of the element size (12-byte elements).
  std::optional<TensorAllocation> odd = PitchedTensorLayout({2, 100}, 12, 256);
  ASSERT_TRUE(odd.has_value());
  EXPECT_THAT(odd->strides, ElementsAre(100, 1));
}

TEST(PitchedTensorLayoutTest, OverflowIsReported) {
  EXPECT_FALSE(PitchedTensorLayout({uint64_t{1} << 40, uint64_t{1} << 30}, 8, 256).has_value());
}

}  // namespace
}  // namespace cubed

namespace cubed {
namespace {

// A bulk upload's chunk arrives in gRPC's slices; any range of it is gathered in order.
TEST(GatherCopyTest, CopiesAnyRangeAcrossPieces) {
  const std::string a = "abc", b, c = "defgh", d = "i";
  const std::vector<absl::Span<const uint8_t>> pieces = {
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(a.data()), a.size()),
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(b.data()), b.size()),
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(c.data()), c.size()),
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(d.data()), d.size())};
  const std::string all = a + b + c + d;
  for (uint64_t from = 0; from <= all.size(); ++from) {
    for (uint64_t n = 0; from + n <= all.size(); ++n) {
      std::string out(n, '.');
      GatherCopy(pieces, from, n, reinterpret_cast<uint8_t*>(out.data()));
      EXPECT_EQ(out, all.substr(from, n)) << from << " +" << n;
    }
  }
}

// Note [Bulk transfers]: a chunk of dense bytes lands in pitched rows in at most three pieces.
TEST(PlanDenseRangeWrite, DenseIsOnePiece) {
  auto plan = PlanDenseRangeWrite({4, 8}, {8, 1}, 4, 10, 50);
  ASSERT_TRUE(plan.has_value());
  ASSERT_EQ(plan->size(), 1u);
  EXPECT_EQ((*plan)[0].strided_offset, 10u);
  EXPECT_EQ((*plan)[0].bytes(), 50u);
  EXPECT_EQ((*plan)[0].dense_offset, 0u);
}

TEST(PlanDenseRangeWrite, PitchedRowsSplitIntoHeadBodyTail) {
  // 5 rows of 3 f32 (12 bytes) at a pitch of 64 elements (256 bytes).
  const std::vector<uint64_t> shape = {5, 3}, strides = {64, 1};
  auto plan = PlanDenseRangeWrite(shape, strides, 4, 8, 30);  // Bytes [8, 38).
  ASSERT_TRUE(plan.has_value());
  ASSERT_EQ(plan->size(), 3u);
  EXPECT_EQ((*plan)[0].strided_offset, 8u);  // Row 0, bytes 8..12.
  EXPECT_EQ((*plan)[0].bytes(), 4u);
  EXPECT_EQ((*plan)[1].strided_offset, 256u);  // Rows 1 and 2 whole.
  EXPECT_EQ((*plan)[1].height, 2u);
  EXPECT_EQ((*plan)[1].pitch, 256u);
  EXPECT_EQ((*plan)[1].dense_offset, 4u);
  EXPECT_EQ((*plan)[2].strided_offset, 768u);  // Row 3, bytes 0..2.
  EXPECT_EQ((*plan)[2].bytes(), 2u);
  EXPECT_EQ((*plan)[2].dense_offset, 28u);
  uint64_t total = 0;
  for (const CopyPiece& p : *plan) total += p.bytes();
  EXPECT_EQ(total, 30u);
}

TEST(PlanDenseRangeWrite, OtherLayoutsHaveNoPlan) {
  EXPECT_FALSE(PlanDenseRangeWrite({4, 4}, {1, 4}, 4, 0, 16).has_value());  // Transposed.
}

}  // namespace
}  // namespace cubed
