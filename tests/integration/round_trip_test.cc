// Create/read round trips of random bytes, sub-view reads and tensor layouts.

#include <random>

#include "tests/integration/integration_test.h"

namespace cubed::integration {
namespace {

class RoundTripTest : public DaemonTest {
 protected:
  // 64 MiB payloads need a larger message limit than the daemon's default may allow.
  static void SetUpTestSuite() { StartDaemon({"--max_message_bytes=134217728"}); }
};

TEST_F(RoundTripTest, CreateThenReadReturnsTheSameBytes) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::mt19937_64 rng(1);
  for (size_t size :
       {size_t{1}, size_t{7}, size_t{4096}, size_t{(1 << 20) + 3}, size_t{64} << 20}) {
    SCOPED_TRACE(size);
    std::string data = RandomBytes(rng, size);
    auto h = client->Create(AsSpan(data));
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ(h->size(), size);
    std::string back = ReadOrDie(*client, *h);
    ASSERT_EQ(back.size(), size);
    EXPECT_TRUE(back == data) << "bytes differ";
  }
}

TEST_F(RoundTripTest, SubViewReadsSkipTheOffsets) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::mt19937_64 rng(2);
  std::string data = RandomBytes(rng, 1000);
  auto h = client->Create(AsSpan(data));
  ASSERT_TRUE(h.ok()) << h.status();
  const std::pair<uint64_t, uint64_t> views[] = {{0, 0},   {1, 0},   {0, 1},     {13, 17},
                                                 {999, 0}, {0, 999}, {500, 500}, {123, 456}};
  std::vector<Binding> bindings;
  for (auto [start, end] : views) bindings.emplace_back(*h, start, end);
  auto all = client->Read(bindings).get();
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), std::size(views));
  for (size_t i = 0; i < std::size(views); ++i) {
    auto [start, end] = views[i];
    EXPECT_EQ((*all)[i], data.substr(start, 1000 - start - end))
        << "view [" << start << ", -" << end << "]";
  }
  // A view longer than the allocation is refused, not truncated.
  auto bad = client->Read({Binding(*h, 600, 401)}).get();
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
}

TEST_F(RoundTripTest, SubViewOfAPaddedEmptyWrittenByAKernel) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto t = client->EmptyTensor({10}, 4);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(client
                  ->Execute(Builtin("fill", ElemType::kI32), {}, {*t},
                            {Scalars{ElemType::kI32, {}, {-7}, {}}})
                  .ok());
  std::string tail = ReadOrDie(*client, Binding(t->handle, 4 * 7, t->handle.size() - 40));
  EXPECT_EQ(FromBytes<int32_t>(tail), (std::vector<int32_t>{-7, -7, -7}));
}

TEST_F(RoundTripTest, TensorStridesAreReturnedAndReadTensorPacksDensely) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::mt19937_64 rng(3);
  const std::vector<std::vector<uint64_t>> shapes = {
      {1}, {7}, {3, 5}, {2, 3, 4}, {1, 1, 9}, {2, 1, 3, 1, 2}, {2, 2, 2, 2, 2, 2, 2, 2}};
  for (uint32_t elem_size : {1u, 2u, 4u, 8u, 16u}) {
    for (const auto& shape : shapes) {
      SCOPED_TRACE(::testing::PrintToString(shape) + " elem_size " + std::to_string(elem_size));
      std::string data = RandomBytes(rng, NumElements(shape) * elem_size);
      auto t = client->CreateTensor(AsSpan(data), shape, elem_size);
      ASSERT_TRUE(t.ok()) << t.status();
      ASSERT_EQ(t->strides.size(), shape.size());
      EXPECT_EQ(t->strides.back(), 1u);
      // Strides never overlap rows: each is at least the extent of the dimension inside it.
      for (size_t d = 0; d + 1 < shape.size(); ++d) {
        EXPECT_GE(t->strides[d], t->strides[d + 1] * shape[d + 1]) << "dim " << d;
      }
      uint64_t span = 1;
      for (size_t d = 0; d < shape.size(); ++d) span += (shape[d] - 1) * t->strides[d];
      EXPECT_GE(t->handle.size(), span * elem_size);
      EXPECT_EQ(ReadTensorOrDie(*client, *t), data);

      auto e = client->EmptyTensor(shape, elem_size);
      ASSERT_TRUE(e.ok()) << e.status();
      EXPECT_EQ(e->strides, t->strides) << "CreateTensor and EmptyTensor lay out alike";
    }
  }
}

TEST_F(RoundTripTest, ReadTensorHonoursPaddedStridesOfTheRawBytes) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  // Store a 3x4 u32 matrix inside a 3x6 buffer and read it back as a strided tensor.
  std::vector<uint32_t> raw(18);
  for (uint32_t i = 0; i < 18; ++i) raw[i] = i;
  auto h = client->Create(ToBytes(raw));
  ASSERT_TRUE(h.ok());
  Tensor view{*h, {3, 4}, {6, 1}, 4};
  EXPECT_EQ(FromBytes<uint32_t>(ReadTensorOrDie(*client, view)),
            (std::vector<uint32_t>{0, 1, 2, 3, 6, 7, 8, 9, 12, 13, 14, 15}));
  // Transposed view: strides {1, 6} over shape {4, 3}.
  Tensor transposed{*h, {4, 3}, {1, 6}, 4};
  EXPECT_EQ(FromBytes<uint32_t>(ReadTensorOrDie(*client, transposed)),
            (std::vector<uint32_t>{0, 6, 12, 1, 7, 13, 2, 8, 14, 3, 9, 15}));
  // Strides reaching past the buffer are refused.
  Tensor too_far{*h, {4, 4}, {6, 1}, 4};
  EXPECT_EQ(client->ReadTensor({too_far}).get().status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cubed::integration
