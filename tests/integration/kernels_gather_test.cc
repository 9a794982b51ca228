// gather against a host reference (numpy.take's semantics, out-of-range indices giving zeros),
// and concatenation as the Python SDK does it: copy into views of the output, bound at offsets.

#include "absl/strings/match.h"
#include "common/kernel_metadata.h"
#include "tests/integration/kernel_test_util.h"

namespace cubed::integration {
namespace {

using GatherKernelTest = DaemonTest;

BuiltinKernel GatherKernel(ElemType dtype, ElemType index_dtype, uint32_t axis) {
  BuiltinKernel k{"gather", dtype, dtype, axis};
  k.index_dtype = index_dtype;
  return k;
}

// Random indices in [-n - 2, n + 2] as I.
template <typename I>
HostTensor<I> RandomIndices(std::mt19937_64& rng, std::vector<uint64_t> shape, int64_t n) {
  HostTensor<I> t{std::move(shape), {}};
  std::uniform_int_distribution<int64_t> pick(-n - 2, n + 2);
  t.data.resize(NumElements(t.shape));
  for (I& v : t.data) v = static_cast<I>(pick(rng));
  return t;
}

// out = table.shape[:axis] + indices.shape + table.shape[axis + 1:], dense tensors.
template <typename T, typename I>
std::vector<T> GatherReference(const HostTensor<T>& table, const HostTensor<I>& indices,
                               uint32_t axis) {
  uint64_t outer = 1, inner = 1;
  for (uint32_t d = 0; d < axis; ++d) outer *= table.shape[d];
  for (size_t d = axis + 1; d < table.shape.size(); ++d) inner *= table.shape[d];
  const int64_t n = static_cast<int64_t>(table.shape[axis]);
  std::vector<T> out;
  for (uint64_t o = 0; o < outer; ++o) {
    for (I raw : indices.data) {
      int64_t k = static_cast<int64_t>(raw);
      if (k < 0) k += n;
      for (uint64_t i = 0; i < inner; ++i) {
        const bool valid = k >= 0 && k < n;
        out.push_back(valid ? table.data[(o * n + k) * inner + i] : T{0});
      }
    }
  }
  return out;
}

TEST_F(GatherKernelTest, MatchesTheReferenceForEveryTypeIndexTypeAndAxis) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::mt19937_64 rng(40);
  struct Case {
    std::vector<uint64_t> table, indices;
    uint32_t axis;
  };
  const std::vector<Case> cases = {{{50, 33}, {4, 6}, 0},  // An embedding [V, D] x [B, S].
                                   {{7, 40}, {300}, 1},    // Along the last axis.
                                   {{3, 9, 5}, {2, 2}, 1},
                                   {{1, 4}, {5}, 0},   // A size-1 axis.
                                   {{6, 5}, {1}, 1}};  // One index.
  for (ElemType t : kNativeElemTypes) {
    WithType(t, [&](auto zero) {
      using T = decltype(zero);
      for (const Case& c : cases) {
        auto table = RandomTensor<T>(rng, c.table, 0, 1000);
        Tensor x = Upload(*client, table);
        const int64_t n = static_cast<int64_t>(c.table[c.axis]);
        std::vector<uint64_t> out_shape(c.table.begin(), c.table.begin() + c.axis);
        out_shape.insert(out_shape.end(), c.indices.begin(), c.indices.end());
        out_shape.insert(out_shape.end(), c.table.begin() + c.axis + 1, c.table.end());
        SCOPED_TRACE(absl::StrCat(ElemTypeName(t), " table ", ShapeString(c.table), " indices ",
                                  ShapeString(c.indices), " axis ", c.axis));
        {
          auto idx = RandomIndices<int32_t>(rng, c.indices, n);
          Tensor i = Upload(*client, idx);
          Tensor y = Output(*client, out_shape, sizeof(T));
          ASSERT_TRUE(client->Execute(GatherKernel(t, ElemType::kI32, c.axis), {x, i}, {y}).ok());
          ExpectNear(Download<T>(*client, y), GatherReference(table, idx, c.axis), 0, 0);
        }
        {
          auto idx = RandomIndices<int64_t>(rng, c.indices, n);
          Tensor i = Upload(*client, idx);
          Tensor y = Output(*client, out_shape, sizeof(T));
          ASSERT_TRUE(client->Execute(GatherKernel(t, ElemType::kI64, c.axis), {x, i}, {y}).ok());
          ExpectNear(Download<T>(*client, y), GatherReference(table, idx, c.axis), 0, 0);
        }
      }
    });
  }
}

TEST_F(GatherKernelTest, ReadsATransposedTableView) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::mt19937_64 rng(41);
  auto stored = RandomTensor<float>(rng, {8, 5}, -1, 1);  // Seen as its [5, 8] transpose.
  Tensor x = Upload(*client, stored);
  Tensor xt{x.handle, {5, 8}, {x.strides[1], x.strides[0]}, 4};
  const std::vector<int64_t> ks = {4, -1, 0, 5, -6, 2};
  Tensor i = Upload(*client, HostTensor<int64_t>{{6}, ks});
  Tensor y = Output(*client, {6, 8}, 4);
  ASSERT_TRUE(client->Execute(GatherKernel(ElemType::kF32, ElemType::kI64, 0), {xt, i}, {y}).ok());
  std::vector<float> want;
  for (int64_t k : ks) {
    if (k < 0) k += 5;
    for (uint64_t c = 0; c < 8; ++c) {
      want.push_back(k >= 0 && k < 5 ? stored.data[c * 5 + static_cast<uint64_t>(k)] : 0.f);
    }
  }
  ExpectNear(Download<float>(*client, y), want, 0, 0);
}

TEST_F(GatherKernelTest, BadAxisIndexTypeAndShapeAreInvalidArgument) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  Tensor x = Output(*client, {5, 7}, 4);
  Tensor i = Upload(*client, HostTensor<int64_t>{{3}, {0, 1, 2}});
  Tensor f = Upload(*client, HostTensor<float>{{3}, {0, 1, 2}});
  struct Bad {
    BuiltinKernel kernel;
    Tensor indices;
    std::string needle;
  };
  const std::vector<Bad> bad = {
      {GatherKernel(ElemType::kF32, ElemType::kI64, 2), i, "axis 2 is out of range"},
      {GatherKernel(ElemType::kF32, ElemType::kF32, 0), f, "index_dtype f32"},
      {GatherKernel(ElemType::kF32, ElemType::kI64, 1), i, "out shape [3, 7] must be"},
  };
  for (const Bad& b : bad) {
    // A fresh output each time: on the stream a failed launch poisons its output.
    Tensor y = Output(*client, {3, 7}, 4);
    absl::Status s = Settled(*client, client->Execute(b.kernel, {x, b.indices}, {y}));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), b.needle)) << s;
  }
}

// The Python SDK's concat: one copy per input into its slice of the output, the slice bound at
// its offset with the output's strides.
TEST_F(GatherKernelTest, ConcatIsACopyIntoAViewOfTheOutput) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::mt19937_64 rng(42);
  auto a = RandomTensor<float>(rng, {2, 3}, -1, 1);
  auto b = RandomTensor<float>(rng, {2, 4}, -1, 1);
  Tensor ta = Upload(*client, a), tb = Upload(*client, b);
  Tensor out = Output(*client, {2, 7}, 4);  // Along axis 1: out[:, 0:3] = a, out[:, 3:7] = b.
  uint64_t start = 0;
  for (const auto& [t, cols] : {std::pair<Tensor, uint64_t>{ta, 3}, {tb, 4}}) {
    const uint64_t offset = start * 4;
    TensorLayout in = TensorLayout::Contiguous({2, cols});
    TensorLayout view = in;
    view.strides[0] = 7;
    const uint64_t view_len = (out.NumElements() * 4 - offset) / 4;
    auto meta = EncodeKernelMetadata({2 * cols, view_len}, {in, view});
    ASSERT_TRUE(meta.ok()) << meta.status();
    LaunchBindings bindings;
    bindings.buffers = {Binding(t.handle), Binding(out.handle, offset, 0)};
    bindings.metadata = *meta;
    ASSERT_TRUE(
        client->Execute(Builtin("copy", ElemType::kF32), CubeCount{1, 1, 1}, bindings).ok());
    start += cols;
  }
  std::vector<float> want;
  for (uint64_t r = 0; r < 2; ++r) {
    for (uint64_t c = 0; c < 3; ++c) want.push_back(a.data[r * 3 + c]);
    for (uint64_t c = 0; c < 4; ++c) want.push_back(b.data[r * 4 + c]);
  }
  ExpectNear(Download<float>(*client, out), want, 0, 0);
}

}  // namespace
}  // namespace cubed::integration
