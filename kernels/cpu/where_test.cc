#include "kernels/cpu/where.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/test_tensor.h"

namespace cubed::kernels::testing {
namespace {

using ::testing::HasSubstr;

struct Shapes {
  std::vector<uint64_t> cond, x, y, out;
};

// Dim d of `idx` as `shape` sees it: broadcast dims read index 0.
std::vector<uint64_t> Broadcast(std::vector<uint64_t> idx, const std::vector<uint64_t>& shape) {
  for (size_t d = 0; d < idx.size(); ++d) {
    if (shape[d] == 1) idx[d] = 0;
  }
  return idx;
}

// Bits of element `idx` of `t`, zero-extended.
uint64_t Bits(const TestTensor& t, const std::vector<uint64_t>& idx) {
  switch (ElemSize(t.dtype())) {
    case 1:
      return t.Get<uint8_t>(idx);
    case 2:
      return t.Get<uint16_t>(idx);
    case 4:
      return t.Get<uint32_t>(idx);
    default:
      return t.Get<uint64_t>(idx);
  }
}

TEST(WhereTest, EveryDtypeBroadcastAndLayoutSelectsTheBits) {
  const std::vector<Shapes> shapes = {
      {{}, {}, {}, {}},
      {{1023}, {1023}, {1023}, {1023}},
      {{7}, {7}, {1}, {7}},  // A mask over one value.
      {{3, 1}, {1, 5}, {3, 5}, {3, 5}},
      {{1, 4, 1, 5}, {2, 1, 3, 5}, {1, 1, 1, 1}, {2, 4, 3, 5}},
  };
  const std::vector<std::vector<Layout>> layouts = {
      {Layout::kContiguous, Layout::kContiguous, Layout::kContiguous, Layout::kContiguous},
      {Layout::kStepped, Layout::kPadded, Layout::kColumnMajor, Layout::kStepped},
      {Layout::kColumnMajor, Layout::kStepped, Layout::kPadded, Layout::kPadded},
  };
  uint64_t seed = 900;
  for (ElemType dt : kEveryType) {
    for (const Shapes& s : shapes) {
      for (const auto& l : layouts) {
        TestTensor cond(ElemType::kBool, s.cond, l[0]), x(dt, s.x, l[1]), y(dt, s.y, l[2]),
            out(dt, s.out, l[3]);
        cond.FillRandom(seed++);
        x.FillRandom(seed++);
        y.FillRandom(seed++);
        ASSERT_TRUE(RunKernel(MakeCall("where", dt), {&cond, &x, &y, &out}).ok());
        ForEachIndex(s.out, [&](const std::vector<uint64_t>& idx) {
          const bool c = cond.Get<uint8_t>(Broadcast(idx, s.cond)) != 0;
          const uint64_t want = c ? Bits(x, Broadcast(idx, s.x)) : Bits(y, Broadcast(idx, s.y));
          ASSERT_EQ(Bits(out, idx), want) << DtypeName(dt);
        });
        ASSERT_TRUE(out.PaddingIntact());
      }
    }
  }
}

TEST(WhereTest, KeepsNanPayloadsSignedZerosAndReadsAnyNonZeroByteAsTrue) {
  TestTensor cond(ElemType::kBool, {4}), x(ElemType::kF32, {4}), y(ElemType::kF32, {1}),
      out(ElemType::kF32, {4});
  const uint8_t c[4] = {7, 0, 255, 1};
  const uint32_t xv[4] = {0x7fc00123u, 0x3f800000u, 0x80000000u, 0xffffffffu};
  for (uint64_t i = 0; i < 4; ++i) {
    cond.Set<uint8_t>({i}, c[i]);
    x.Set<uint32_t>({i}, xv[i]);
  }
  y.Set<float>({0}, -std::numeric_limits<float>::infinity());
  ASSERT_TRUE(RunKernel(MakeCall("where", ElemType::kF32), {&cond, &x, &y, &out}).ok());
  EXPECT_EQ(out.Get<uint32_t>({0}), 0x7fc00123u);  // NaN with its payload.
  EXPECT_EQ(out.Get<float>({1}), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(out.Get<uint32_t>({2}), 0x80000000u);  // -0.
  EXPECT_EQ(out.Get<uint32_t>({3}), 0xffffffffu);
}

TEST(WhereTest, IntegerLimitsAreCopiedExactly) {
  TestTensor cond(ElemType::kBool, {2}), x(ElemType::kI64, {2}), y(ElemType::kI64, {2}),
      out(ElemType::kI64, {2});
  cond.Set<uint8_t>({0}, 1);
  cond.Set<uint8_t>({1}, 0);
  x.Set<int64_t>({0}, std::numeric_limits<int64_t>::max());
  x.Set<int64_t>({1}, 0);
  y.Set<int64_t>({0}, 0);
  y.Set<int64_t>({1}, std::numeric_limits<int64_t>::min() + 1);
  ASSERT_TRUE(RunKernel(MakeCall("where", ElemType::kI64), {&cond, &x, &y, &out}).ok());
  EXPECT_EQ(out.Get<int64_t>({0}), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(out.Get<int64_t>({1}), std::numeric_limits<int64_t>::min() + 1);
}

TEST(WhereTest, RunsInPlaceOnX) {
  TestTensor cond(ElemType::kBool, {4, 6}), x(ElemType::kF64, {4, 6}, Layout::kPadded),
      y(ElemType::kF64, {4, 1});
  cond.FillRandom(1);
  x.FillRandom(2);
  y.FillRandom(3);
  std::vector<double> want;
  ForEachIndex(x.shape(), [&](const auto& i) {
    want.push_back(cond.Get<uint8_t>(i) != 0 ? x.GetDouble(i) : y.GetDouble({i[0], 0}));
  });
  BuiltinCall call = MakeCall("where", ElemType::kF64);
  call.metadata = kernels::ToMetadataWords(
      *EncodeKernelMetadata({cond.buffer_len(), x.buffer_len(), y.buffer_len(), x.buffer_len()},
                            {cond.layout(), x.layout(), y.layout(), x.layout()}));
  ASSERT_TRUE(RunBuiltinCpu(call, {cond.buffer(), x.buffer(), y.buffer(), x.buffer()}).ok());
  size_t k = 0;
  ForEachIndex(x.shape(), [&](const auto& i) { EXPECT_EQ(x.GetDouble(i), want[k++]); });
}

TEST(WhereTest, ShapesAndBuffersAreChecked) {
  TestTensor cond(ElemType::kBool, {3, 2}), x(ElemType::kF32, {3, 4}), y(ElemType::kF32, {3, 4}),
      out(ElemType::kF32, {3, 4});
  absl::Status s = RunKernel(MakeCall("where", ElemType::kF32), {&cond, &x, &y, &out});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "kernel 'where': cond shape [3, 2] does not broadcast to out shape [3, 4]: dim 1 is "
            "2, must be 4 or 1");
  TestTensor y3(ElemType::kF32, {1, 4, 1});
  TestTensor c2(ElemType::kBool, {3, 4});
  s = RunKernel(MakeCall("where", ElemType::kF32), {&c2, &x, &y3, &out});
  EXPECT_THAT(std::string(s.message()), HasSubstr("y has rank 3 but out has rank 2"));
  s = RunKernel(MakeCall("where", ElemType::kF32), {&c2, &x, &out});
  EXPECT_EQ(s.message(), "kernel 'where' takes 4 buffers (cond, x, y, out), got 3");
  // cond holds bool: 12 of them need 12 bytes, whatever the dtype.
  BuiltinCall call = MakeCall("where", ElemType::kF32);
  call.metadata = kernels::ToMetadataWords(
      *EncodeKernelMetadata({12, x.buffer_len(), y.buffer_len(), out.buffer_len()},
                            {c2.layout(), x.layout(), y.layout(), out.layout()}));
  std::vector<uint8_t> small(11, 1);
  s = RunBuiltinCpu(call, {{small.data(), 11}, x.buffer(), y.buffer(), out.buffer()});
  EXPECT_THAT(std::string(s.message()), HasSubstr("buffer 0 (cond) holds 11 bytes"));
}

}  // namespace
}  // namespace cubed::kernels::testing
