// matmul (batched, broadcast batch dims), softmax, causal_softmax and causal_attention against
// host references.

#include <algorithm>
#include <cmath>

#include "gmock/gmock.h"
#include "tests/integration/kernel_test_util.h"

namespace cubed::integration {
namespace {

using MatmulSoftmaxTest = DaemonTest;

struct MatmulCase {
  std::vector<uint64_t> a, b, out;
};

const std::vector<MatmulCase> kMatmulCases = {
    {{1, 1}, {1, 1}, {1, 1}},
    {{3, 4}, {4, 5}, {3, 5}},
    {{33, 17}, {17, 65}, {33, 65}},
    {{1, 7}, {7, 1}, {1, 1}},
    {{2, 3, 7}, {2, 7, 5}, {2, 3, 5}},
    {{1, 3, 4}, {3, 4, 6}, {3, 3, 6}},           // a's batch broadcast.
    {{2, 1, 5, 3}, {1, 4, 3, 2}, {2, 4, 5, 2}},  // Both broadcast.
};

template <typename T>
std::vector<T> MatmulRef(const HostTensor<T>& a, const HostTensor<T>& b,
                         const std::vector<uint64_t>& out_shape) {
  const size_t r = out_shape.size();
  const uint64_t m = out_shape[r - 2], n = out_shape[r - 1], k = a.shape[r - 1];
  std::vector<uint64_t> batch_out(out_shape.begin(), out_shape.end() - 2);
  std::vector<uint64_t> batch_a(a.shape.begin(), a.shape.end() - 2);
  std::vector<uint64_t> batch_b(b.shape.begin(), b.shape.end() - 2);
  std::vector<T> out(NumElements(out_shape));
  const uint64_t batches = NumElements(batch_out);
  for (uint64_t bi = 0; bi < batches; ++bi) {
    auto idx = Unflatten(bi, batch_out);
    const T* pa = a.data.data() + BroadcastOffset(idx, batch_a) * m * k;
    const T* pb = b.data.data() + BroadcastOffset(idx, batch_b) * k * n;
    T* po = out.data() + bi * m * n;
    for (uint64_t i = 0; i < m; ++i) {
      for (uint64_t j = 0; j < n; ++j) {
        if constexpr (std::is_floating_point_v<T>) {
          double acc = 0;
          for (uint64_t p = 0; p < k; ++p) acc += double(pa[i * k + p]) * double(pb[p * n + j]);
          po[i * n + j] = static_cast<T>(acc);
        } else {
          T acc = 0;
          for (uint64_t p = 0; p < k; ++p) {
            acc = WrapOp(acc, WrapOp(pa[i * k + p], pb[p * n + j], '*'), '+');
          }
          po[i * n + j] = acc;
        }
      }
    }
  }
  return out;
}

TEST_F(MatmulSoftmaxTest, MatmulEveryTypeAndBatchBroadcast) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::mt19937_64 rng(50);
  for (ElemType t : kNativeElemTypes) {
    WithType(t, [&](auto zero) {
      using T = decltype(zero);
      for (const MatmulCase& c : kMatmulCases) {
        SCOPED_TRACE(absl::StrCat("matmul ", ElemTypeName(t), " ", ShapeString(c.a), " x ",
                                  ShapeString(c.b)));
        const double lo = std::is_signed_v<T> ? -10 : 0;
        auto a = RandomTensor<T>(rng, c.a, lo, 10);
        auto b = RandomTensor<T>(rng, c.b, lo, 10);
        Tensor x = Upload(*client, a);
        Tensor y = Upload(*client, b);
        Tensor z = Output(*client, c.out, sizeof(T));
        absl::Status s = client->Execute(Builtin("matmul", t), {x, y}, {z});
        ASSERT_TRUE(s.ok()) << s;
        // The daemon may accumulate f32 in f32 and in another order: allow K * eps * sum|a*b|.
        const bool f32 = std::is_same_v<T, float>;
        ExpectNear(Download<T>(*client, z), MatmulRef(a, b, c.out), f32 ? 1e-4 : 1e-12,
                   f32 ? 1e-2 : 1e-9);
      }
    });
  }
}

TEST_F(MatmulSoftmaxTest, MatmulInnerDimensionMismatchIsInvalidArgument) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  Tensor a = Output(*client, {3, 4}, 4);
  Tensor b = Output(*client, {5, 6}, 4);
  Tensor out = Output(*client, {3, 6}, 4);
  absl::Status s =
      Settled(*client, client->Execute(Builtin("matmul", ElemType::kF32), {a, b}, {out}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

template <typename T>
std::vector<T> SoftmaxRef(const HostTensor<T>& in) {
  const uint64_t n = in.shape.back();
  std::vector<T> out(in.data.size());
  for (uint64_t row = 0; row < in.data.size() / n; ++row) {
    const T* x = in.data.data() + row * n;
    double m = x[0];
    for (uint64_t i = 1; i < n; ++i) m = std::max<double>(m, x[i]);
    double sum = 0;
    for (uint64_t i = 0; i < n; ++i) sum += std::exp(double(x[i]) - m);
    for (uint64_t i = 0; i < n; ++i) out[row * n + i] = T(std::exp(double(x[i]) - m) / sum);
  }
  return out;
}

TEST_F(MatmulSoftmaxTest, SoftmaxOverTheLastAxis) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::mt19937_64 rng(51);
  const std::vector<std::vector<uint64_t>> shapes = {{1}, {5}, {3, 7}, {2, 3, 129}, {1000, 2}};
  for (ElemType t : {ElemType::kF32, ElemType::kF64}) {
    WithType(t, [&](auto zero) {
      using T = decltype(zero);
      for (const auto& shape : shapes) {
        SCOPED_TRACE(absl::StrCat("softmax ", ElemTypeName(t), " ", ShapeString(shape)));
        // Large magnitudes: a naive exp would overflow.
        auto in = RandomTensor<T>(rng, shape, -500, 500);
        Tensor x = Upload(*client, in);
        Tensor y = Output(*client, shape, sizeof(T));
        absl::Status s = client->Execute(Builtin("softmax", t), {x}, {y});
        ASSERT_TRUE(s.ok()) << s;
        auto got = Download<T>(*client, y);
        ExpectNear(got, SoftmaxRef(in), 1e-5, 1e-6);
        // Each row sums to 1.
        const uint64_t n = shape.back();
        for (uint64_t row = 0; row < got.size() / n; ++row) {
          double sum = 0;
          for (uint64_t i = 0; i < n; ++i) sum += got[row * n + i];
          EXPECT_NEAR(sum, 1.0, 1e-5) << "row " << row;
        }
      }
    });
  }
}

// causal_softmax: query q (the second-to-last index) sees keys 0..q, scaled; the rest is 0.
template <typename T>
std::vector<T> CausalSoftmaxRef(const HostTensor<T>& in, double scale) {
  const uint64_t keys = in.shape.back(), queries = in.shape[in.shape.size() - 2];
  std::vector<T> out(in.data.size(), T(0));
  for (uint64_t row = 0; row < in.data.size() / keys; ++row) {
    const T* x = in.data.data() + row * keys;
    const uint64_t visible = std::min(keys, row % queries + 1);
    double m = scale * x[0];
    for (uint64_t i = 1; i < visible; ++i) m = std::max<double>(m, scale * x[i]);
    double sum = 0;
    for (uint64_t i = 0; i < visible; ++i) sum += std::exp(scale * x[i] - m);
    for (uint64_t i = 0; i < visible; ++i)
      out[row * keys + i] = T(std::exp(scale * x[i] - m) / sum);
  }
  return out;
}

TEST_F(MatmulSoftmaxTest, CausalSoftmaxOverTheLowerTriangle) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::mt19937_64 rng(52);
  const std::vector<std::vector<uint64_t>> shapes = {
      {1, 1}, {4, 4}, {3, 8}, {8, 3}, {2, 5, 17, 17}};
  for (ElemType t : {ElemType::kF32, ElemType::kF64}) {
    WithType(t, [&](auto zero) {
      using T = decltype(zero);
      for (const auto& shape : shapes) {
        SCOPED_TRACE(absl::StrCat("causal_softmax ", ElemTypeName(t), " ", ShapeString(shape)));
        auto in = RandomTensor<T>(rng, shape, -50, 50);
        Tensor x = Upload(*client, in);
        Tensor y = Output(*client, shape, sizeof(T));
        absl::Status s = client->Execute(Builtin("causal_softmax", t), {x}, {y},
                                         {ScalarOf(ElemType::kF64, 0.125)});
        ASSERT_TRUE(s.ok()) << s;
        ExpectNear(Download<T>(*client, y), CausalSoftmaxRef(in, 0.125), 1e-5, 1e-6);
      }
    });
  }
}

TEST_F(MatmulSoftmaxTest, CausalSoftmaxNeedsAFiniteScaleAndTwoDims) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto expect = [&](std::vector<uint64_t> shape, std::vector<Scalars> scalars,
                    const std::string& what) {
    Tensor x = Output(*client, shape, 4);
    Tensor y = Output(*client, shape, 4);
    const absl::Status s = Settled(
        *client,
        client->Execute(Builtin("causal_softmax", ElemType::kF32), {x}, {y}, std::move(scalars)));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr(what));
  };
  expect({4, 4}, {}, "takes exactly one scalar group (scale, one f32 or f64 value), got 0");
  expect({4, 4}, {ScalarOf(ElemType::kF64, INFINITY)}, "scale is inf; it must be finite");
  expect({4}, {ScalarOf(ElemType::kF64, 1)}, "needs rank >= 2");
}

// causal_attention: out row i = softmax over keys s <= i of scale * q_i . k_s, times v; batch
// dims of k and v may broadcast.
template <typename T>
std::vector<T> CausalAttentionRef(const HostTensor<T>& q, const HostTensor<T>& k,
                                  const HostTensor<T>& v, const std::vector<uint64_t>& out_shape,
                                  double scale) {
  const size_t r = out_shape.size();
  const uint64_t len_q = out_shape[r - 2], ev = out_shape[r - 1], e = q.shape[r - 1];
  const uint64_t len_k = k.shape[r - 2];
  std::vector<uint64_t> batch_out(out_shape.begin(), out_shape.end() - 2);
  std::vector<T> out(NumElements(out_shape));
  for (uint64_t bi = 0; bi < NumElements(batch_out); ++bi) {
    const auto idx = Unflatten(bi, batch_out);
    auto base = [&](const HostTensor<T>& t) {
      return t.data.data() +
             BroadcastOffset(idx, std::vector<uint64_t>(t.shape.begin(), t.shape.end() - 2)) *
                 t.shape[r - 2] * t.shape[r - 1];
    };
    const T *pq = base(q), *pk = base(k), *pv = base(v);
    for (uint64_t i = 0; i < len_q; ++i) {
      const uint64_t visible = std::min(len_k, i + 1);
      std::vector<double> score(visible);
      double m = -INFINITY, sum = 0;
      for (uint64_t s = 0; s < visible; ++s) {
        double dot = 0;
        for (uint64_t j = 0; j < e; ++j) dot += double(pq[i * e + j]) * double(pk[s * e + j]);
        score[s] = scale * dot;
        m = std::max(m, score[s]);
      }
      for (uint64_t s = 0; s < visible; ++s) sum += std::exp(score[s] - m);
      for (uint64_t c = 0; c < ev; ++c) {
        double acc = 0;
        for (uint64_t s = 0; s < visible; ++s)
          acc += std::exp(score[s] - m) * double(pv[s * ev + c]);
        out[(bi * len_q + i) * ev + c] = T(visible > 0 ? acc / sum : 0);
      }
    }
  }
  return out;
}

TEST_F(MatmulSoftmaxTest, CausalAttentionMatchesTheReference) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::mt19937_64 rng(53);
  struct Case {
    std::vector<uint64_t> q, k, v, out;
  };
  const std::vector<Case> cases = {
      {{1, 1}, {1, 1}, {1, 1}, {1, 1}},
      {{5, 8}, {9, 8}, {9, 3}, {5, 3}},
      {{9, 4}, {3, 4}, {3, 6}, {9, 6}},
      {{2, 3, 70, 64}, {1, 3, 70, 64}, {1, 3, 70, 64}, {2, 3, 70, 64}},  // Shared keys.
  };
  for (ElemType t : {ElemType::kF32, ElemType::kF64}) {
    WithType(t, [&](auto zero) {
      using T = decltype(zero);
      for (const Case& c : cases) {
        SCOPED_TRACE(absl::StrCat("causal_attention ", ElemTypeName(t), " ", ShapeString(c.q)));
        auto q = RandomTensor<T>(rng, c.q, -2, 2);
        auto k = RandomTensor<T>(rng, c.k, -2, 2);
        auto v = RandomTensor<T>(rng, c.v, -2, 2);
        Tensor tq = Upload(*client, q), tk = Upload(*client, k), tv = Upload(*client, v);
        Tensor out = Output(*client, c.out, sizeof(T));
        absl::Status s = client->Execute(Builtin("causal_attention", t), {tq, tk, tv}, {out},
                                         {ScalarOf(ElemType::kF64, 0.125)});
        ASSERT_TRUE(s.ok()) << s;
        ExpectNear(Download<T>(*client, out), CausalAttentionRef(q, k, v, c.out, 0.125), 1e-5,
                   1e-6);
      }
    });
  }
}

TEST_F(MatmulSoftmaxTest, CausalAttentionRefusesShapesThatDoNotChain) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  Tensor q = Output(*client, {4, 8}, 4), k = Output(*client, {5, 8}, 4);
  Tensor v = Output(*client, {6, 3}, 4), out = Output(*client, {4, 3}, 4);
  const absl::Status s =
      Settled(*client, client->Execute(Builtin("causal_attention", ElemType::kF32), {q, k, v},
                                       {out}, {ScalarOf(ElemType::kF64, 1)}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("every key needs one value"));
}

TEST_F(MatmulSoftmaxTest, SoftmaxOfIntegersIsRefused) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  Tensor x = Output(*client, {2, 3}, 4);
  absl::Status s = Settled(*client, client->Execute(Builtin("softmax", ElemType::kI32), {x}, {x}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

}  // namespace
}  // namespace cubed::integration
