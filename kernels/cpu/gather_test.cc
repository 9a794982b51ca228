#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cpu/test_tensor.h"

namespace cubed::kernels::testing {
namespace {

using Shape = std::vector<uint64_t>;

// numpy.take's shape: table.shape[:axis] + indices.shape + table.shape[axis + 1:].
Shape GatherShape(const Shape& table, const Shape& indices, uint32_t axis) {
  Shape out(table.begin(), table.begin() + axis);
  out.insert(out.end(), indices.begin(), indices.end());
  out.insert(out.end(), table.begin() + axis + 1, table.end());
  return out;
}

absl::Status Gather(TestTensor& table, TestTensor& indices, TestTensor& out, uint32_t axis) {
  BuiltinCall call = MakeCall("gather", table.dtype());
  call.axis = axis;
  call.index_dtype = indices.dtype();
  return RunKernel(call, {&table, &indices, &out});
}

// Checks every element of `out` against the reference: the table element the normalized index
// picks, or 0 for an index outside [-n, n).
void ExpectGathered(const TestTensor& table, const TestTensor& indices, const TestTensor& out,
                    uint32_t axis) {
  const int64_t n = static_cast<int64_t>(table.shape()[axis]);
  const size_t r = indices.shape().size();
  ForEachIndex(out.shape(), [&](const Shape& idx) {
    const Shape j(idx.begin() + axis, idx.begin() + axis + r);
    int64_t k =
        indices.dtype() == ElemType::kI32 ? indices.Get<int32_t>(j) : indices.Get<int64_t>(j);
    if (k < 0 && k >= -n) k += n;
    double want = 0;
    if (k >= 0 && k < n) {
      Shape t(idx.begin(), idx.begin() + axis);
      t.push_back(static_cast<uint64_t>(k));
      t.insert(t.end(), idx.begin() + axis + r, idx.end());
      want = table.GetDouble(t);
    }
    ASSERT_EQ(out.GetDouble(idx), want) << "out element " << ::testing::PrintToString(idx);
  });
}

// Random indices in [-n - 3, n + 3): in range, from the end, and out of range both ways.
void FillIndices(TestTensor& indices, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> pick(-n - 3, n + 2);
  ForEachIndex(indices.shape(), [&](const Shape& j) { indices.SetDouble(j, pick(rng)); });
}

struct Case {
  Shape table;
  Shape indices;
  uint32_t axis;
};

const std::vector<Case> kCases = {
    {{5, 7}, {3, 4}, 0},     // An embedding: [V, D] x [B, S] -> [B, S, D].
    {{5, 7}, {6}, 1},        // Along the last axis.
    {{3, 1, 4}, {2, 2}, 1},  // A size-1 axis: only 0 and -1 are in range.
    {{2, 3, 4}, {5}, 1},     // A middle axis.
    {{6}, {}, 0},            // A scalar index: out is rank 0.
    {{4, 3}, {}, 1},         // A scalar index dropping the last axis.
    {{4, 3}, {0}, 0},        // No indices: empty out.
    {{0, 3}, {4}, 0},        // An empty axis: every index is out of range.
    {{1, 1}, {1, 1, 1}, 0},  // Everything of size 1.
    {{2, 2, 2, 2}, {3}, 3},  // Rank 4.
};

TEST(GatherTest, EveryDtypeIndexTypeAndCaseMatchesTheReference) {
  uint64_t seed = 100;
  for (ElemType dt : kEveryType) {
    for (ElemType it : {ElemType::kI32, ElemType::kI64}) {
      for (const Case& c : kCases) {
        SCOPED_TRACE(absl::StrCat(DtypeName(dt), " indices ", DtypeName(it), " table ",
                                  ::testing::PrintToString(c.table), " indices ",
                                  ::testing::PrintToString(c.indices), " axis ", c.axis));
        TestTensor table(dt, c.table), indices(it, c.indices);
        TestTensor out(dt, GatherShape(c.table, c.indices, c.axis));
        table.FillRandom(seed++);
        FillIndices(indices, static_cast<int64_t>(c.table[c.axis]), seed++);
        const absl::Status s = Gather(table, indices, out, c.axis);
        ASSERT_TRUE(s.ok()) << s;
        ExpectGathered(table, indices, out, c.axis);
        ASSERT_TRUE(out.PaddingIntact());
      }
    }
  }
}

TEST(GatherTest, StridedViewsOfEveryOperand) {
  uint64_t seed = 200;
  const std::vector<Layout> layouts = {Layout::kContiguous, Layout::kPadded, Layout::kColumnMajor,
                                       Layout::kStepped};
  for (ElemType dt : {ElemType::kF32, ElemType::kF64, ElemType::kBF16, ElemType::kU8}) {
    for (Layout lt : layouts) {
      for (Layout li : layouts) {
        for (Layout lo : layouts) {
          for (const Case& c : {Case{{6, 5}, {2, 3}, 0}, Case{{4, 6, 3}, {5}, 1}}) {
            SCOPED_TRACE(absl::StrCat(DtypeName(dt), " layouts ", static_cast<int>(lt), "/",
                                      static_cast<int>(li), "/", static_cast<int>(lo), " axis ",
                                      c.axis));
            TestTensor table(dt, c.table, lt), indices(ElemType::kI64, c.indices, li);
            TestTensor out(dt, GatherShape(c.table, c.indices, c.axis), lo);
            table.FillRandom(seed++);
            FillIndices(indices, static_cast<int64_t>(c.table[c.axis]), seed++);
            ASSERT_TRUE(Gather(table, indices, out, c.axis).ok());
            ExpectGathered(table, indices, out, c.axis);
            ASSERT_TRUE(out.PaddingIntact());
          }
        }
      }
    }
  }
}

// Big enough that ParallelFor splits the output: chunks begin and end inside rows.
TEST(GatherTest, LargeOutputsSplitOverThreads) {
  uint64_t seed = 300;
  for (const Case& c : {Case{{1000, 67}, {700}, 0}, Case{{300, 50}, {401}, 1},
                        Case{{3, 40000}, {2}, 0}, Case{{64, 33, 17}, {50}, 1}}) {
    SCOPED_TRACE(::testing::PrintToString(c.table));
    for (Layout lo : {Layout::kContiguous, Layout::kPadded}) {
      TestTensor table(ElemType::kF32, c.table), indices(ElemType::kI32, c.indices);
      TestTensor out(ElemType::kF32, GatherShape(c.table, c.indices, c.axis), lo);
      table.FillRandom(seed++);
      FillIndices(indices, static_cast<int64_t>(c.table[c.axis]), seed++);
      ASSERT_TRUE(Gather(table, indices, out, c.axis).ok());
      ExpectGathered(table, indices, out, c.axis);
      ASSERT_TRUE(out.PaddingIntact());
    }
  }
}

TEST(GatherTest, NegativeIndicesCountFromTheEndAndOthersOutsideWriteZeros) {
  TestTensor table(ElemType::kI32, {4, 2}), indices(ElemType::kI64, {8}),
      out(ElemType::kI32, {8, 2});
  for (uint64_t i = 0; i < 4; ++i) {
    table.Set<int32_t>({i, 0}, static_cast<int32_t>(10 * i + 1));
    table.Set<int32_t>({i, 1}, static_cast<int32_t>(10 * i + 2));
  }
  const int64_t k[8] = {0,
                        3,
                        -1,
                        -4,
                        -5,
                        4,
                        std::numeric_limits<int64_t>::min(),
                        std::numeric_limits<int64_t>::max()};
  for (uint64_t i = 0; i < 8; ++i) indices.Set<int64_t>({i}, k[i]);
  ASSERT_TRUE(Gather(table, indices, out, 0).ok());
  const int32_t want[8][2] = {{1, 2}, {31, 32}, {31, 32}, {1, 2}, {0, 0}, {0, 0}, {0, 0}, {0, 0}};
  for (uint64_t i = 0; i < 8; ++i) {
    EXPECT_EQ(out.Get<int32_t>({i, 0}), want[i][0]) << "index " << k[i];
    EXPECT_EQ(out.Get<int32_t>({i, 1}), want[i][1]) << "index " << k[i];
  }
  TestTensor indices32(ElemType::kI32, {3}), out32(ElemType::kI32, {3, 2});
  indices32.Set<int32_t>({0}, std::numeric_limits<int32_t>::min());
  indices32.Set<int32_t>({1}, std::numeric_limits<int32_t>::max());
  indices32.Set<int32_t>({2}, -2);
  ASSERT_TRUE(Gather(table, indices32, out32, 0).ok());
  EXPECT_EQ(out32.Get<int32_t>({0, 0}), 0);
  EXPECT_EQ(out32.Get<int32_t>({1, 1}), 0);
  EXPECT_EQ(out32.Get<int32_t>({2, 0}), 21);
}

// Bits move unchanged, as with copy: NaN payloads and -0.0 survive.
TEST(GatherTest, MovesBits) {
  TestTensor table(ElemType::kF32, {2}), indices(ElemType::kI32, {2}), out(ElemType::kF32, {2});
  table.Set<uint32_t>({0}, 0x7fc01234u);
  table.Set<uint32_t>({1}, 0x80000000u);
  indices.Set<int32_t>({0}, 0);
  indices.Set<int32_t>({1}, 1);
  ASSERT_TRUE(Gather(table, indices, out, 0).ok());
  EXPECT_EQ(out.Get<uint32_t>({0}), 0x7fc01234u);
  EXPECT_EQ(out.Get<uint32_t>({1}), 0x80000000u);
}

void ExpectInvalid(const absl::Status& s, const std::string& needle) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), needle)) << s;
}

TEST(GatherTest, RefusesBadAxisIndexTypeAndShapes) {
  TestTensor table(ElemType::kF32, {5, 7}), indices(ElemType::kI64, {3});
  TestTensor out(ElemType::kF32, {3, 7});
  ExpectInvalid(Gather(table, indices, out, 2), "axis 2 is out of range for table of rank 2");
  for (ElemType bad : {ElemType::kF32, ElemType::kU32, ElemType::kI16, ElemType::kBool}) {
    TestTensor wrong(bad, {3});
    ExpectInvalid(Gather(table, wrong, out, 0),
                  absl::StrCat("index_dtype ", DtypeName(bad), " is not an index type"));
  }
  TestTensor short_out(ElemType::kF32, {3, 6});
  ExpectInvalid(Gather(table, indices, short_out, 0),
                "out shape [3, 6] must be table.shape[:axis] + indices.shape + "
                "table.shape[axis + 1:] = [3, 7]");
  TestTensor flat_out(ElemType::kF32, {21});
  ExpectInvalid(Gather(table, indices, flat_out, 0), "= [3, 7]");
  TestTensor axis1_out(ElemType::kF32, {5, 3});
  EXPECT_TRUE(Gather(table, indices, axis1_out, 1).ok());
  TestTensor scalar(ElemType::kF32, {}), scalar_out(ElemType::kF32, {3});
  ExpectInvalid(Gather(scalar, indices, scalar_out, 0), "out of range for table of rank 0");
  BuiltinCall call = MakeCall("gather", ElemType::kF32);
  call.index_dtype = static_cast<ElemType>(77);
  ExpectInvalid(RunKernel(call, {&table, &indices, &out}), "index_dtype unknown type 77");
}

TEST(GatherTest, RefusesAnOutputOverlappingTheTable) {
  TestTensor table(ElemType::kF32, {4, 4}), indices(ElemType::kI64, {4});
  BuiltinCall call = MakeCall("gather", ElemType::kF32);
  std::vector<uint64_t> lens = {table.buffer_len(), indices.buffer_len(), table.buffer_len()};
  std::vector<TensorLayout> layouts = {table.layout(), indices.layout(), table.layout()};
  call.metadata = kernels::ToMetadataWords(*EncodeKernelMetadata(lens, layouts));
  const std::vector<HostBuffer> buffers = {table.buffer(), indices.buffer(), table.buffer()};
  ExpectInvalid(RunBuiltinCpu(call, buffers), "overlaps buffer 0 (table)");
}

}  // namespace
}  // namespace cubed::kernels::testing
