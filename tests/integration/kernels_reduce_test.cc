// The reductions (sum, max, min, mean, argmax) along every axis against host references.

#include <algorithm>
#include <cmath>

#include "tests/integration/kernel_test_util.h"

namespace cubed::integration {
namespace {

using ReduceKernelTest = DaemonTest;

const std::vector<std::vector<uint64_t>> kShapes = {{1},      {7},       {3, 5},  {2, 3, 4},
                                                    {1, 257}, {5, 1, 3}, {64, 33}};

// Folds `in` along `axis` with `fold(values)` into an output of shape[axis] = 1.
template <typename T, typename Out, typename Fold>
std::vector<Out> ReduceRef(const HostTensor<T>& in, uint32_t axis, Fold fold) {
  std::vector<uint64_t> out_shape = in.shape;
  out_shape[axis] = 1;
  const auto strides = DenseStrides(in.shape);
  std::vector<Out> out(NumElements(out_shape));
  for (uint64_t o = 0; o < out.size(); ++o) {
    auto idx = Unflatten(o, out_shape);
    uint64_t base = 0;
    for (size_t d = 0; d < idx.size(); ++d) base += idx[d] * strides[d];
    std::vector<T> values;
    for (uint64_t k = 0; k < in.shape[axis]; ++k)
      values.push_back(in.data[base + k * strides[axis]]);
    out[o] = fold(values);
  }
  return out;
}

// Runs reduction `name` along every axis of every shape for type T; `Out` is the output type.
template <typename T, typename Out, typename Fold>
void CheckReduce(Client& client, const std::string& name, double lo, double hi, Fold fold,
                 std::mt19937_64& rng) {
  const ElemType t = ElemTypeOf<T>();
  for (const auto& shape : kShapes) {
    for (uint32_t axis = 0; axis < shape.size(); ++axis) {
      SCOPED_TRACE(
          absl::StrCat(name, " ", ElemTypeName(t), " ", ShapeString(shape), " axis ", axis));
      auto in = RandomTensor<T>(rng, shape, lo, hi);
      std::vector<uint64_t> out_shape = shape;
      out_shape[axis] = 1;
      Tensor x = Upload(client, in);
      Tensor y = Output(client, out_shape, sizeof(Out));
      BuiltinKernel k = Builtin(name, t);
      k.axis = axis;
      absl::Status s = client.Execute(k, {x}, {y});
      ASSERT_TRUE(s.ok()) << s;
      ExpectNear(Download<Out>(client, y), ReduceRef<T, Out>(in, axis, fold), 1e-5, 1e-5);
    }
  }
}

template <typename T>
T SumOf(const std::vector<T>& v) {
  if constexpr (std::is_floating_point_v<T>) {
    double s = 0;
    for (T x : v) s += x;
    return static_cast<T>(s);
  } else {
    T s = 0;
    for (T x : v) s = WrapOp(s, x, '+');
    return s;
  }
}

template <typename T>
void CheckAllReductions(Client& client, std::mt19937_64& rng) {
  // Small integer ranges make ties likely: argmax must pick the first maximum.
  const double lo = std::is_floating_point_v<T> ? -100 : (std::is_signed_v<T> ? -20 : 0);
  const double hi = std::is_floating_point_v<T> ? 100 : 20;
  CheckReduce<T, T>(
      client, "sum", lo, hi, [](const std::vector<T>& v) { return SumOf(v); }, rng);
  CheckReduce<T, T>(
      client, "max", lo, hi,
      [](const std::vector<T>& v) { return *std::max_element(v.begin(), v.end()); }, rng);
  CheckReduce<T, T>(
      client, "min", lo, hi,
      [](const std::vector<T>& v) { return *std::min_element(v.begin(), v.end()); }, rng);
  CheckReduce<T, int64_t>(
      client, "argmax", lo, hi,
      [](const std::vector<T>& v) {
        return static_cast<int64_t>(std::max_element(v.begin(), v.end()) - v.begin());
      },
      rng);
  if constexpr (std::is_floating_point_v<T>) {
    CheckReduce<T, T>(
        client, "mean", lo, hi,
        [](const std::vector<T>& v) {
          double s = 0;
          for (T x : v) s += x;
          return static_cast<T>(s / v.size());
        },
        rng);
  }
}

TEST_F(ReduceKernelTest, F32) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::mt19937_64 rng(40);
  CheckAllReductions<float>(*client, rng);
}

TEST_F(ReduceKernelTest, F64) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::mt19937_64 rng(41);
  CheckAllReductions<double>(*client, rng);
}

TEST_F(ReduceKernelTest, I32) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::mt19937_64 rng(42);
  CheckAllReductions<int32_t>(*client, rng);
}

TEST_F(ReduceKernelTest, U32) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::mt19937_64 rng(43);
  CheckAllReductions<uint32_t>(*client, rng);
}

TEST_F(ReduceKernelTest, I64) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::mt19937_64 rng(44);
  CheckAllReductions<int64_t>(*client, rng);
}

TEST_F(ReduceKernelTest, BadAxisOrOutputShapeIsInvalidArgument) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  Tensor in = Output(*client, {3, 4}, 4);
  Tensor out = Output(*client, {3, 1}, 4);
  BuiltinKernel k = Builtin("sum", ElemType::kF32);
  k.axis = 2;
  absl::Status s = Settled(*client, client->Execute(k, {in}, {out}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "axis 2 of rank 2: " << s;
  k.axis = 0;  // Out should then be [1, 4].
  s = Settled(*client, client->Execute(k, {in}, {out}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "wrong out shape: " << s;
  Tensor ints = Output(*client, {3, 4}, 4);
  Tensor ints_out = Output(*client, {3, 1}, 4);
  BuiltinKernel mean = Builtin("mean", ElemType::kI32);
  mean.axis = 1;
  s = Settled(*client, client->Execute(mean, {ints}, {ints_out}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "mean i32: " << s;
}

}  // namespace
}  // namespace cubed::integration
