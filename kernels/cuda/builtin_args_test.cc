#include <cstring>
#include <vector>

#include "common/kernel_metadata.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_kernels.h"

namespace cubed::kernels {
namespace {

TensorLayout Strided(std::vector<uint64_t> shape, std::vector<uint64_t> strides) {
  TensorLayout t;
  t.rank = static_cast<uint32_t>(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    t.shape[d] = shape[d];
    t.strides[d] = strides[d];
  }
  return t;
}

// A call of `name` on `tensors`, each in a buffer exactly as long as its span, of `elem` bytes.
BuiltinCall Call(const char* name, ElemType dtype, const std::vector<TensorLayout>& tensors,
                 std::vector<uint64_t>* bytes, uint32_t elem = 4) {
  BuiltinCall call;
  call.name = name;
  call.dtype = dtype;
  std::vector<uint64_t> lens;
  for (const TensorLayout& t : tensors) {
    lens.push_back(t.SpanElements());
    bytes->push_back(t.SpanElements() * elem);
  }
  call.metadata = kernels::ToMetadataWords(*EncodeKernelMetadata(lens, tensors));
  return call;
}

TEST(MakeCudaBuiltinArgsTest, BroadcastBinaryCopiesLayoutsAndZeroesBroadcastStrides) {
  std::vector<uint64_t> bytes;
  const BuiltinCall call = Call("add", ElemType::kF32,
                                {TensorLayout::Contiguous({2, 3}), TensorLayout::Contiguous({1, 3}),
                                 TensorLayout::Contiguous({2, 3})},
                                &bytes);
  auto args = MakeCudaBuiltinArgs(call, bytes);
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->num_buffers, 3u);
  EXPECT_EQ(args->count, 6u);
  EXPECT_EQ(args->flags & CUBED_CUDA_DENSE, 0u);  // rhs has another shape.
  EXPECT_EQ(args->buffers[0].bytes, 24u);
  EXPECT_EQ(args->buffers[1].bytes, 12u);
  EXPECT_EQ(args->buffers[1].rank, 2u);
  EXPECT_EQ(args->buffers[1].shape[0], 1u);
  EXPECT_EQ(args->buffers[1].shape[1], 3u);
  EXPECT_EQ(args->buffers[1].strides[0], 0u);  // Broadcast.
  EXPECT_EQ(args->buffers[1].strides[1], 1u);
  EXPECT_EQ(args->buffers[2].strides[0], 3u);
  EXPECT_EQ(args->buffers[0].ptr, 0u);  // Left to the caller.
}

TEST(MakeCudaBuiltinArgsTest, DenseOnlyWhenEveryBufferIsContiguous) {
  std::vector<uint64_t> bytes;
  const BuiltinCall neg =
      Call("neg", ElemType::kF64,
           {TensorLayout::Contiguous({4, 5}), TensorLayout::Contiguous({4, 5})}, &bytes, 8);
  auto dense = MakeCudaBuiltinArgs(neg, bytes);
  ASSERT_TRUE(dense.ok()) << dense.status();
  EXPECT_NE(dense->flags & CUBED_CUDA_DENSE, 0u);
  EXPECT_EQ(dense->buffers[0].bytes, 160u);
  bytes.clear();
  const BuiltinCall neg_t =
      Call("neg", ElemType::kF64, {Strided({4, 5}, {1, 4}), TensorLayout::Contiguous({4, 5})},
           &bytes, 8);
  auto transposed = MakeCudaBuiltinArgs(neg_t, bytes);
  ASSERT_TRUE(transposed.ok()) << transposed.status();
  EXPECT_EQ(transposed->flags & CUBED_CUDA_DENSE, 0u);
  EXPECT_EQ(transposed->buffers[0].strides[0], 1u);
  EXPECT_EQ(transposed->buffers[0].strides[1], 4u);
}

TEST(MakeCudaBuiltinArgsTest, FillValueBits) {
  std::vector<uint64_t> bytes;
  BuiltinCall call = Call("fill", ElemType::kF64, {TensorLayout::Contiguous({7})}, &bytes, 8);
  const double v = -2.5;
  ScalarGroup g;
  g.elem = ElemType::kF64;
  g.bytes.resize(8);
  std::memcpy(g.bytes.data(), &v, 8);
  call.scalars.push_back(g);
  auto args = MakeCudaBuiltinArgs(call, bytes);
  ASSERT_TRUE(args.ok()) << args.status();
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  EXPECT_EQ(args->scalar, bits);
  EXPECT_EQ(args->count, 7u);
}

TEST(MakeCudaBuiltinArgsTest, ReductionSoftmaxAndMatmulCounts) {
  std::vector<uint64_t> bytes;
  BuiltinCall sum =
      Call("sum", ElemType::kF32,
           {TensorLayout::Contiguous({4, 5, 6}), TensorLayout::Contiguous({4, 1, 6})}, &bytes);
  sum.axis = 1;
  auto r = MakeCudaBuiltinArgs(sum, bytes);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->count, 24u);
  EXPECT_EQ(r->axis, 1u);
  EXPECT_EQ(r->variant, CUBED_CUDA_GROUP_WARP);
  EXPECT_EQ(r->buffers[1].strides[1], 0u);

  bytes.clear();
  const BuiltinCall softmax = Call(
      "softmax", ElemType::kF32,
      {TensorLayout::Contiguous({3, 2, 5000}), TensorLayout::Contiguous({3, 2, 5000})}, &bytes);
  auto s = MakeCudaBuiltinArgs(softmax, bytes);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->count, 6u);  // Rows.
  EXPECT_EQ(s->axis, 2u);
  EXPECT_EQ(s->variant, CUBED_CUDA_GROUP_BLOCK);
  EXPECT_EQ(s->scalar, 0u);

  bytes.clear();  // A bias row broadcast over a dense output: CUBED_CUDA_SUFFIX.
  const BuiltinCall bias =
      Call("add", ElemType::kBF16,
           {TensorLayout::Contiguous({4, 9, 12}), TensorLayout::Contiguous({1, 1, 12}),
            TensorLayout::Contiguous({4, 9, 12})},
           &bytes);
  auto b = MakeCudaBuiltinArgs(bias, bytes);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->flags, CUBED_CUDA_SUFFIX);
  bytes.clear();  // A column [4, 9, 1] is not a suffix block: the strided loop.
  const BuiltinCall column =
      Call("add", ElemType::kF32,
           {TensorLayout::Contiguous({4, 9, 12}), TensorLayout::Contiguous({4, 9, 1}),
            TensorLayout::Contiguous({4, 9, 12})},
           &bytes);
  auto c2 = MakeCudaBuiltinArgs(column, bytes);
  ASSERT_TRUE(c2.ok()) << c2.status();
  EXPECT_EQ(c2->flags, 0u);

  bytes.clear();
  BuiltinCall causal =
      Call("causal_softmax", ElemType::kBF16,
           {TensorLayout::Contiguous({4, 9, 9}), TensorLayout::Contiguous({4, 9, 9})}, &bytes);
  const float eighth = 0.125f;
  causal.scalars.push_back({ElemType::kF32, ScalarBytes(4)});
  std::memcpy(causal.scalars[0].bytes.data(), &eighth, 4);
  auto c = MakeCudaBuiltinArgs(causal, bytes);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->count, 36u);  // Rows: every query of every head.
  EXPECT_EQ(c->variant, CUBED_CUDA_GROUP_WARP);
  double scale = 0;
  std::memcpy(&scale, &c->scalar, sizeof(scale));
  EXPECT_EQ(scale, 0.125);  // As an f64, whatever the scalar's type.

  bytes.clear();
  const BuiltinCall mm =
      Call("matmul", ElemType::kF32,
           {TensorLayout::Contiguous({2, 1, 100, 7}), TensorLayout::Contiguous({1, 3, 7, 130}),
            TensorLayout::Contiguous({2, 3, 100, 130})},
           &bytes);
  auto m = MakeCudaBuiltinArgs(mm, bytes);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->count, 6u);  // Batches.
  EXPECT_EQ(m->buffers[0].strides[1], 0u);
  EXPECT_EQ(m->buffers[1].strides[0], 0u);
  const CudaLaunchDims dims = BuiltinLaunchDims(mm, &*m, 132);
  EXPECT_EQ(dims.grid[0], 6u * 2 * 3);  // Batches x 64-row tiles x 64-column tiles.
  EXPECT_EQ(dims.block[0], 256u);
}

TEST(MakeCudaBuiltinArgsTest, NormsPassRowsAndEps) {
  std::vector<uint64_t> bytes;
  BuiltinCall call = Call("layer_norm", ElemType::kF32,
                          {Strided({6, 4096}, {1, 6}), Strided({4096}, {2}),
                           TensorLayout::Contiguous({4096}), TensorLayout::Contiguous({6, 4096})},
                          &bytes);
  ScalarGroup eps{ElemType::kF32, {}};
  const float value = 1e-5f;
  eps.bytes.resize(4);
  std::memcpy(eps.bytes.data(), &value, 4);
  call.scalars.push_back(eps);
  auto args = MakeCudaBuiltinArgs(call, bytes);
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->num_buffers, 4u);
  EXPECT_EQ(args->count, 6u);  // Rows.
  EXPECT_EQ(args->axis, 1u);
  EXPECT_EQ(args->variant, CUBED_CUDA_GROUP_BLOCK);
  EXPECT_EQ(args->buffers[0].strides[1], 6u);  // Transposed input.
  EXPECT_EQ(args->buffers[1].strides[0], 2u);  // Stepped weight.
  double got = 0;
  std::memcpy(&got, &args->scalar, 8);
  EXPECT_EQ(got, static_cast<double>(value));  // eps travels as an f64, whatever its group.
  // A 4096-float row: a block of 256 threads holds it in registers, one block per row.
  CudaLaunchDims dims = BuiltinLaunchDims(call, &*args, 132);
  EXPECT_EQ(dims.block[0], 4096u / (CUBED_CUDA_SOFTMAX_CACHE_BYTES / 4));
  EXPECT_EQ(dims.grid[0], 6u);
  // Short rows: a warp each.
  bytes.clear();
  BuiltinCall rms = Call(
      "rms_norm", ElemType::kBF16,
      {TensorLayout::Contiguous({1000, 512}), TensorLayout::Contiguous({1000, 512})}, &bytes, 2);
  rms.scalars.push_back(eps);
  args = MakeCudaBuiltinArgs(rms, bytes);
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->variant, CUBED_CUDA_GROUP_WARP);
  dims = BuiltinLaunchDims(rms, &*args, 132);
  EXPECT_EQ(dims.block[0], 256u);
  EXPECT_EQ(dims.grid[0], 1000u / 8);
  // No eps: the validation error.
  rms.scalars.clear();
  EXPECT_EQ(MakeCudaBuiltinArgs(rms, bytes).status().code(), absl::StatusCode::kInvalidArgument);
}

// causal_attention: the MMA path for bf16 with E = Ev = 64, a block per 128 queries; the generic
// path (f32) a warp per query. Both launch CUBED_CUDA_ATTENTION_MMA_THREADS threads a block, the
// kernel's __launch_bounds__.
TEST(MakeCudaBuiltinArgsTest, AttentionBlocks) {
  for (const ElemType dtype : {ElemType::kBF16, ElemType::kF32}) {
    std::vector<uint64_t> bytes;
    const TensorLayout t = TensorLayout::Contiguous({2, 3, 300, 64});
    BuiltinCall call = Call("causal_attention", dtype, {t, t, t, t}, &bytes, 4);
    ScalarGroup scale{ElemType::kF64, ScalarBytes(8)};
    const double value = 0.125;
    std::memcpy(scale.bytes.data(), &value, 8);
    call.scalars.push_back(scale);
    auto args = MakeCudaBuiltinArgs(call, bytes);
    ASSERT_TRUE(args.ok()) << args.status();
    EXPECT_EQ(args->count, 6u);  // Batches.
    const bool mma = dtype == ElemType::kBF16;
    EXPECT_EQ(args->variant, mma ? CUBED_CUDA_ATTENTION_MMA : CUBED_CUDA_ATTENTION_GENERIC);
    const CudaLaunchDims dims = BuiltinLaunchDims(call, &*args, 132);
    EXPECT_EQ(dims.block[0], CUBED_CUDA_ATTENTION_MMA_THREADS);
    EXPECT_EQ(dims.grid[0],
              mma ? 6u * 3 : 6u * 300 / (CUBED_CUDA_ATTENTION_MMA_THREADS / 32));  // 300 / 128.
  }
}

TEST(MakeCudaBuiltinArgsTest, ValidationErrorsPassThrough) {
  std::vector<uint64_t> bytes;
  const BuiltinCall call =
      Call("copy", ElemType::kF32, {TensorLayout::Contiguous({8}), TensorLayout::Contiguous({8})},
           &bytes);
  bytes[1] = 16;  // Too small for 8 floats.
  EXPECT_EQ(MakeCudaBuiltinArgs(call, bytes).status().code(), absl::StatusCode::kInvalidArgument);
  BuiltinCall unknown = call;
  unknown.name = "nope";
  EXPECT_EQ(MakeCudaBuiltinArgs(unknown, bytes).status().code(), absl::StatusCode::kNotFound);
}

// Note [Gather strategy]: dense rows of 32 elements or more go to a warp (2048 or more: a
// block) per row, counted in rows; anything else to a thread per output element.
TEST(MakeCudaBuiltinArgsTest, GatherRowsOrElements) {
  struct Expect {
    std::vector<TensorLayout> tensors;
    uint32_t axis;
    uint32_t variant;
    uint64_t count;
    uint32_t grid;  // On 100 SMs.
  };
  const std::vector<Expect> cases = {
      {{TensorLayout::Contiguous({1000, 64}), TensorLayout::Contiguous({2, 8}),
        TensorLayout::Contiguous({2, 8, 64})},
       0,
       CUBED_CUDA_GROUP_WARP,
       16,
       2},
      {{TensorLayout::Contiguous({10, 4096}), TensorLayout::Contiguous({3}),
        TensorLayout::Contiguous({3, 4096})},
       0,
       CUBED_CUDA_GROUP_BLOCK,
       3,
       3},
      {{TensorLayout::Contiguous({10, 16}), TensorLayout::Contiguous({3}),
        TensorLayout::Contiguous({3, 16})},
       0,
       CUBED_CUDA_GROUP_THREAD,
       48,
       1},
      {{TensorLayout::Contiguous({64, 10}), TensorLayout::Contiguous({700}),
        TensorLayout::Contiguous({64, 700})},
       1,
       CUBED_CUDA_GROUP_THREAD,
       44800,
       175},
      // Padded out rows stay dense within the row; a transposed table does not.
      {{TensorLayout::Contiguous({10, 64}), TensorLayout::Contiguous({3}),
        Strided({3, 64}, {100, 1})},
       0,
       CUBED_CUDA_GROUP_WARP,
       3,
       1},
      {{Strided({10, 64}, {1, 10}), TensorLayout::Contiguous({3}),
        TensorLayout::Contiguous({3, 64})},
       0,
       CUBED_CUDA_GROUP_THREAD,
       192,
       1},
      {{TensorLayout::Contiguous({10, 64}), TensorLayout::Contiguous({0}),
        TensorLayout::Contiguous({0, 64})},
       0,
       CUBED_CUDA_GROUP_WARP,
       0,
       1},
  };
  for (const Expect& e : cases) {
    std::vector<uint64_t> bytes;
    BuiltinCall call = Call("gather", ElemType::kF32, e.tensors, &bytes);
    call.axis = e.axis;
    call.index_dtype = ElemType::kI32;
    auto args = MakeCudaBuiltinArgs(call, bytes);
    ASSERT_TRUE(args.ok()) << args.status();
    EXPECT_EQ(args->axis, e.axis);
    EXPECT_EQ(args->variant, e.variant) << e.count;
    EXPECT_EQ(args->count, e.count);
    EXPECT_EQ(BuiltinLaunchDims(call, &*args, 100).grid[0], e.grid) << e.count;
  }
}

TEST(BuiltinLaunchDimsTest, FillsTheDeviceButNotMore) {
  std::vector<uint64_t> bytes;
  const BuiltinCall big =
      Call("copy", ElemType::kF32,
           {TensorLayout::Contiguous({1u << 28}), TensorLayout::Contiguous({1u << 28})}, &bytes);
  auto args = MakeCudaBuiltinArgs(big, bytes);
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(BuiltinLaunchDims(big, &*args, 132).grid[0], 132u * 32);
  bytes.clear();
  const BuiltinCall empty =
      Call("copy", ElemType::kF32, {TensorLayout::Contiguous({0}), TensorLayout::Contiguous({0})},
           &bytes);
  args = MakeCudaBuiltinArgs(empty, bytes);
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->count, 0u);
  EXPECT_EQ(BuiltinLaunchDims(empty, &*args, 132).grid[0], 1u);
}

TEST(BuiltinLaunchDimsTest, FewOutputsSplitTheirAxisOverTheDevice) {
  std::vector<uint64_t> bytes;
  BuiltinCall full =
      Call("sum", ElemType::kF32,
           {TensorLayout::Contiguous({1u << 26}), TensorLayout::Contiguous({1})}, &bytes);
  auto args = MakeCudaBuiltinArgs(full, bytes);
  ASSERT_TRUE(args.ok()) << args.status();
  CudaLaunchDims dims = BuiltinLaunchDims(full, &*args, 132);
  EXPECT_EQ(args->splits, 132u);  // One wave: one block of 1024 threads (64 registers) an SM.
  EXPECT_EQ(dims.grid[0], args->splits);
  EXPECT_EQ(dims.block[0], 1024u);
  EXPECT_EQ(dims.workspace_bytes, CUBED_CUDA_SPLIT_PARTIALS_OFFSET + 16u * args->splits);

  // Thousands of long rows: a warp streams each (no block-wide barriers); the 512 blocks of 8
  // warps fit in one wave of 528 (4 blocks of 256 threads an SM), so no row is split.
  bytes.clear();
  BuiltinCall rows =
      Call("sum", ElemType::kF32,
           {TensorLayout::Contiguous({4096, 16384}), TensorLayout::Contiguous({4096, 1})}, &bytes);
  rows.axis = 1;
  args = MakeCudaBuiltinArgs(rows, bytes);
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->variant, CUBED_CUDA_GROUP_WARP);
  dims = BuiltinLaunchDims(rows, &*args, 132);
  EXPECT_EQ(args->splits, 0u);  // floor(132 * 4 / 512) = 1: not split.
  EXPECT_EQ(dims.grid[0], 512u);
  EXPECT_EQ(dims.workspace_bytes, 0u);
  // Few long rows keep a block each.
  bytes.clear();
  BuiltinCall few =
      Call("sum", ElemType::kF32,
           {TensorLayout::Contiguous({16, 16384}), TensorLayout::Contiguous({16, 1})}, &bytes);
  few.axis = 1;
  args = MakeCudaBuiltinArgs(few, bytes);
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->variant, CUBED_CUDA_GROUP_BLOCK);

  // Columns: a thread per output, each column's axis split too; short axes are not split.
  bytes.clear();
  BuiltinCall cols =
      Call("sum", ElemType::kF32,
           {TensorLayout::Contiguous({4096, 16384}), TensorLayout::Contiguous({1, 16384})}, &bytes);
  args = MakeCudaBuiltinArgs(cols, bytes);
  ASSERT_TRUE(args.ok()) << args.status();
  dims = BuiltinLaunchDims(cols, &*args, 132);
  EXPECT_EQ(args->variant, CUBED_CUDA_GROUP_THREAD);
  // 64 blocks of 256 outputs in a wave of 528 blocks: 8 slices each (a ninth would start a second
  // wave that runs alone).
  EXPECT_EQ(args->splits, 8u);
  EXPECT_EQ(dims.grid[0], 64u * args->splits);
  bytes.clear();
  BuiltinCall shortaxis =
      Call("max", ElemType::kF32, {TensorLayout::Contiguous({7}), TensorLayout::Contiguous({1})},
           &bytes);
  args = MakeCudaBuiltinArgs(shortaxis, bytes);
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(BuiltinLaunchDims(shortaxis, &*args, 132).workspace_bytes, 0u);
  EXPECT_EQ(args->splits, 0u);
}

TEST(BuiltinLaunchDimsTest, SoftmaxBlocksHoldTheirRow) {
  std::vector<uint64_t> bytes;
  const BuiltinCall rows = Call(
      "softmax", ElemType::kF32,
      {TensorLayout::Contiguous({4096, 4096}), TensorLayout::Contiguous({4096, 4096})}, &bytes);
  auto args = MakeCudaBuiltinArgs(rows, bytes);
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->variant, CUBED_CUDA_GROUP_BLOCK);
  CudaLaunchDims dims = BuiltinLaunchDims(rows, &*args, 132);
  EXPECT_EQ(dims.block[0], 4096u / (CUBED_CUDA_SOFTMAX_CACHE_BYTES / 4));
  EXPECT_EQ(dims.grid[0], 4096u);
  bytes.clear();
  const BuiltinCall longer = Call(
      "softmax", ElemType::kF64,
      {TensorLayout::Contiguous({2, 100000}), TensorLayout::Contiguous({2, 100000})}, &bytes, 8);
  args = MakeCudaBuiltinArgs(longer, bytes);
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(BuiltinLaunchDims(longer, &*args, 132).block[0], 1024u);  // Three passes.
}

}  // namespace
}  // namespace cubed::kernels
