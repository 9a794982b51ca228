#include <algorithm>
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/test_tensor.h"

namespace cubed::kernels::testing {
namespace {

BuiltinCall AttentionCall(ElemType dt, double scale, ElemType scale_type = ElemType::kF64) {
  BuiltinCall call = MakeCall("causal_attention", dt);
  call.scalars.push_back(OneScalar(scale_type, scale));
  return call;
}

// The f64 reference at every index of `out`: query i sees keys 0..min(i, S - 1); a size-1 batch
// dim of an input broadcasts.
void ExpectAttention(const TestTensor& q, const TestTensor& k, const TestTensor& v,
                     const TestTensor& out, double scale, ElemType dt) {
  const std::vector<uint64_t>& shape = out.shape();
  const size_t r = shape.size();
  const uint64_t e = q.shape()[r - 1], s_len = k.shape()[r - 2], ev = shape[r - 1];
  std::vector<uint64_t> rows = shape;
  rows.back() = 1;
  auto at = [&](const TestTensor& t, std::vector<uint64_t> idx, uint64_t row, uint64_t col) {
    for (size_t d = 0; d + 2 < r; ++d) {
      if (t.shape()[d] == 1) idx[d] = 0;
    }
    idx[r - 2] = row;
    idx[r - 1] = col;
    return t.GetDouble(idx);
  };
  ForEachIndex(rows, [&](std::vector<uint64_t> idx) {
    const uint64_t i = idx[r - 2];
    const uint64_t visible = std::min(s_len, i + 1);
    std::vector<double> score(visible);
    double m = -INFINITY, z = 0;
    for (uint64_t s = 0; s < visible; ++s) {
      double dot = 0;
      for (uint64_t j = 0; j < e; ++j) dot += at(q, idx, i, j) * at(k, idx, s, j);
      score[s] = scale * dot;
      m = std::max(m, score[s]);
    }
    for (uint64_t s = 0; s < visible; ++s) z += std::exp(score[s] - m);
    for (uint64_t c = 0; c < ev; ++c) {
      double want = 0;
      for (uint64_t s = 0; s < visible; ++s) want += std::exp(score[s] - m) * at(v, idx, s, c);
      if (visible > 0) want /= z;
      idx[r - 1] = c;
      ASSERT_TRUE(Close(out.GetDouble(idx), want, dt))
          << ElemTypeName(dt) << " query " << i << ", column " << c << ": " << out.GetDouble(idx)
          << " vs " << want;
    }
  });
}

struct Shapes {
  std::vector<uint64_t> q, k, v, out;
};

TEST(CausalAttentionTest, MatchesReferenceInEveryLayout) {
  const std::vector<Shapes> cases = {
      {{5, 4}, {7, 4}, {7, 6}, {5, 6}},                          // L < S.
      {{9, 3}, {4, 3}, {4, 2}, {9, 2}},                          // L > S: late rows see every key.
      {{2, 3, 6, 8}, {2, 3, 6, 8}, {2, 3, 6, 5}, {2, 3, 6, 5}},  // Batch and heads.
      {{2, 3, 6, 8}, {1, 3, 6, 8}, {1, 3, 6, 5}, {2, 3, 6, 5}},  // k and v broadcast over batch.
      {{1, 1}, {1, 1}, {1, 1}, {1, 1}},
      {{3, 33}, {40, 33}, {40, 1}, {3, 1}},
  };
  uint64_t seed = 9100;
  for (ElemType dt : kFloatTypes) {
    for (const Shapes& sh : cases) {
      for (const auto& [in_layout, out_layout] :
           std::vector<std::pair<Layout, Layout>>{{Layout::kContiguous, Layout::kContiguous},
                                                  {Layout::kColumnMajor, Layout::kPadded},
                                                  {Layout::kPadded, Layout::kStepped}}) {
        TestTensor q(dt, sh.q, in_layout), k(dt, sh.k, in_layout), v(dt, sh.v, Layout::kStepped);
        TestTensor out(dt, sh.out, out_layout);
        q.FillRandom(seed++, -1.5, 1.5);
        k.FillRandom(seed++, -1.5, 1.5);
        v.FillRandom(seed++);
        const double scale = 0.7;
        ASSERT_TRUE(RunKernel(AttentionCall(dt, scale), {&q, &k, &v, &out}).ok());
        ExpectAttention(q, k, v, out, scale, dt);
        ASSERT_TRUE(out.PaddingIntact());
      }
    }
  }
}

TEST(CausalAttentionTest, NoKeysGiveZerosAndAnF32ScaleWorks) {
  TestTensor q(ElemType::kF32, {3, 4}), k(ElemType::kF32, {0, 4}), v(ElemType::kF32, {0, 5});
  TestTensor out(ElemType::kF32, {3, 5});
  q.FillRandom(1);
  for (uint64_t i = 0; i < 3; ++i) {
    for (uint64_t j = 0; j < 5; ++j) out.SetDouble({i, j}, 7);
  }
  ASSERT_TRUE(
      RunKernel(AttentionCall(ElemType::kF32, 0.5, ElemType::kF32), {&q, &k, &v, &out}).ok());
  for (uint64_t i = 0; i < 3; ++i) {
    for (uint64_t j = 0; j < 5; ++j) EXPECT_EQ(out.GetDouble({i, j}), 0.0);
  }
}

// A NaN or +inf score spreads over its row only; rows that do not see the key are untouched.
TEST(CausalAttentionTest, NonFiniteScoresGiveNanInTheRowsThatSeeThem) {
  for (const double bad : {NAN, INFINITY}) {
    TestTensor q(ElemType::kF32, {4, 2}), k(ElemType::kF32, {4, 2}), v(ElemType::kF32, {4, 3});
    TestTensor out(ElemType::kF32, {4, 3});
    q.FillRandom(2);
    k.FillRandom(3);
    v.FillRandom(4);
    k.SetDouble({2, 0}, bad);  // Key 2: seen by queries 2 and 3.
    q.SetDouble({2, 0}, 1.0);
    q.SetDouble({3, 0}, 1.0);
    ASSERT_TRUE(RunKernel(AttentionCall(ElemType::kF32, 1.0), {&q, &k, &v, &out}).ok());
    for (uint64_t i = 0; i < 4; ++i) {
      for (uint64_t j = 0; j < 3; ++j) {
        EXPECT_EQ(std::isnan(out.GetDouble({i, j})), i >= 2) << i << ", " << j << " with " << bad;
      }
    }
  }
}

}  // namespace
}  // namespace cubed::kernels::testing
