#include "kernels/validate.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/test_tensor.h"

namespace cubed::kernels::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// The metadata of contiguous tensors of `shapes`, each buffer exactly as long as its tensor.
std::vector<uint32_t> Meta(const std::vector<std::vector<uint64_t>>& shapes) {
  std::vector<uint64_t> lens;
  std::vector<TensorLayout> layouts;
  for (const auto& s : shapes) {
    layouts.push_back(TensorLayout::Contiguous(s));
    lens.push_back(layouts.back().NumElements());
  }
  return *EncodeKernelMetadata(lens, layouts);
}

BuiltinCall Call(std::string name, ElemType dt, const std::vector<std::vector<uint64_t>>& shapes) {
  BuiltinCall call = MakeCall(std::move(name), dt);
  call.metadata = Meta(shapes);
  return call;
}

// Byte sizes of contiguous tensors of `shapes` and element size `es`.
std::vector<uint64_t> Bytes(const std::vector<std::vector<uint64_t>>& shapes, uint64_t es = 4) {
  std::vector<uint64_t> b;
  for (const auto& s : shapes) b.push_back(TensorLayout::Contiguous(s).NumElements() * es);
  return b;
}

TEST(ValidateTest, NamesAreSortedUniqueAndComplete) {
  const std::vector<std::string> names = BuiltinKernelNames();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());
  for (const char* n : {"fill", "copy",    "cast", "neg",  "abs",    "relu",   "exp",    "log",
                        "sqrt", "sigmoid", "tanh", "add",  "sub",    "mul",    "div",    "max",
                        "min",  "pow",     "sum",  "mean", "argmax", "matmul", "softmax"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  }
  EXPECT_EQ(names.size(), 23u);
}

TEST(ValidateTest, ValidCallPasses) {
  const std::vector<std::vector<uint64_t>> s = {{2, 3}, {1, 3}, {2, 3}};
  EXPECT_TRUE(ValidateBuiltin(Call("add", ElemType::kF32, s), Bytes(s)).ok());
}

TEST(ValidateTest, UnknownKernelIsNotFound) {
  const absl::Status st = ValidateBuiltin(Call("frobnicate", ElemType::kF32, {{1}}), {4});
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(st.message(), HasSubstr("'frobnicate'"));
}

TEST(ValidateTest, UnsupportedDtypeNamesKernelAndDtype) {
  const std::vector<std::vector<uint64_t>> s = {{4}, {4}};
  const absl::Status st = ValidateBuiltin(Call("exp", ElemType::kI32, s), Bytes(s));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("'exp'"), HasSubstr("i32"), HasSubstr("f32, f64")));
}

TEST(ValidateTest, UnknownDtypeValue) {
  const std::vector<std::vector<uint64_t>> s = {{4}, {4}};
  BuiltinCall call = Call("cast", ElemType::kF32, s);
  call.out_dtype = static_cast<ElemType>(77);
  const absl::Status st = ValidateBuiltin(call, Bytes(s));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("out_dtype 77"));
}

TEST(ValidateTest, WrongBufferCount) {
  const std::vector<std::vector<uint64_t>> s = {{4}, {4}};
  absl::Status st = ValidateBuiltin(Call("add", ElemType::kF32, s), Bytes(s));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "kernel 'add' takes 3 buffers (lhs, rhs, out), got 2");
  // "max" is a reduction with 2 buffers and elementwise with 3.
  st = ValidateBuiltin(Call("max", ElemType::kF32, {{1}}), {4});
  EXPECT_EQ(st.message(),
            "kernel 'max' takes 2 buffers (in, out) or 3 buffers (lhs, rhs, out), got 1");
}

TEST(ValidateTest, MalformedMetadata) {
  const std::vector<std::vector<uint64_t>> s = {{4}, {4}};
  BuiltinCall call = Call("copy", ElemType::kF32, s);
  call.metadata.resize(5);
  const absl::Status st = ValidateBuiltin(call, Bytes(s));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("'copy'"), HasSubstr("metadata")));
}

TEST(ValidateTest, ShapeMismatchNamesTheDims) {
  std::vector<std::vector<uint64_t>> s = {{2, 3}, {3, 2}};
  absl::Status st = ValidateBuiltin(Call("copy", ElemType::kF32, s), Bytes(s));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("[3, 2]"), HasSubstr("[2, 3]"), HasSubstr("dim 0")));
  s = {{2, 3}, {2, 2}, {2, 4}};
  st = ValidateBuiltin(Call("mul", ElemType::kF32, s), Bytes(s));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("lhs shape [2, 3]"), HasSubstr("dim 1 is 3"),
                                  HasSubstr("must be 4 or 1")));
  s = {{3}, {2, 3}, {2, 3}};
  st = ValidateBuiltin(Call("add", ElemType::kF32, s), Bytes(s));
  EXPECT_THAT(st.message(), AllOf(HasSubstr("lhs has rank 1"), HasSubstr("out has rank 2")));
}

TEST(ValidateTest, MatmulShapeErrors) {
  std::vector<std::vector<uint64_t>> s = {{2, 3}, {4, 5}, {2, 5}};
  absl::Status st = ValidateBuiltin(Call("matmul", ElemType::kF32, s), Bytes(s));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("K = 3"), HasSubstr("(4)")));
  s = {{2, 3}, {3, 5}, {2, 4}};
  st = ValidateBuiltin(Call("matmul", ElemType::kF32, s), Bytes(s));
  EXPECT_THAT(st.message(), HasSubstr("[M, N] = [2, 5]"));
  s = {{3}, {3}, {1}};
  st = ValidateBuiltin(Call("matmul", ElemType::kF32, s), Bytes(s));
  EXPECT_THAT(st.message(), HasSubstr("needs rank >= 2"));
  s = {{2, 2, 3}, {3, 3, 5}, {2, 2, 5}};
  st = ValidateBuiltin(Call("matmul", ElemType::kF32, s), Bytes(s));
  EXPECT_THAT(st.message(), AllOf(HasSubstr("b shape [3, 3, 5]"), HasSubstr("dim 0 is 3")));
}

TEST(ValidateTest, ReductionAxisAndShape) {
  std::vector<std::vector<uint64_t>> s = {{2, 3}, {2, 1}};
  BuiltinCall call = Call("sum", ElemType::kF32, s);
  call.axis = 2;
  absl::Status st = ValidateBuiltin(call, Bytes(s));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("axis 2"), HasSubstr("rank 2")));
  call.axis = 0;
  st = ValidateBuiltin(call, Bytes(s));
  EXPECT_THAT(st.message(), AllOf(HasSubstr("out dim 0 is 2, must be 1")));
  s = {{2, 0}, {2, 1}};
  call = Call("max", ElemType::kF32, s);
  call.axis = 1;
  st = ValidateBuiltin(call, Bytes(s));
  EXPECT_THAT(st.message(), HasSubstr("cannot reduce axis 1 of size 0"));
  s = {{2, 3}, {2, 1}};
  call = Call("argmax", ElemType::kF32, s);
  call.axis = 1;
  EXPECT_THAT(ValidateBuiltin(call, Bytes(s)).message(), HasSubstr("buffer 1 (out) holds 8 bytes"))
      << "argmax writes i64";
  EXPECT_TRUE(ValidateBuiltin(call, {24, 16}).ok());
}

TEST(ValidateTest, ScalarCountAndType) {
  const std::vector<std::vector<uint64_t>> s = {{4}};
  BuiltinCall call = Call("fill", ElemType::kF32, s);
  absl::Status st = ValidateBuiltin(call, Bytes(s));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("exactly one scalar group"), HasSubstr("got 0")));
  call.scalars.push_back(OneScalar(ElemType::kI32, 1));
  st = ValidateBuiltin(call, Bytes(s));
  EXPECT_THAT(st.message(), HasSubstr("scalar group is i32 but the dtype is f32"));
  call.scalars[0] = OneScalar(ElemType::kF32, 1);
  call.scalars[0].bytes.push_back(0);
  st = ValidateBuiltin(call, Bytes(s));
  EXPECT_THAT(st.message(), HasSubstr("holds 5 bytes"));
  const std::vector<std::vector<uint64_t>> s2 = {{4}, {4}};
  call = Call("neg", ElemType::kF32, s2);
  call.scalars.push_back(OneScalar(ElemType::kF32, 1));
  st = ValidateBuiltin(call, Bytes(s2));
  EXPECT_THAT(st.message(), HasSubstr("'neg' takes no scalars"));
}

TEST(ValidateTest, BufferTooSmallForLayoutNamesBufferAndSizes) {
  const std::vector<std::vector<uint64_t>> s = {{2, 3}, {2, 3}, {2, 3}};
  absl::Status st = ValidateBuiltin(Call("add", ElemType::kF32, s), {24, 20, 24});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("buffer 1 (rhs) holds 20 bytes"),
                                  HasSubstr("spans 6 f32 elements = 24 bytes")));
  // A padded layout needs its whole span, not just its element count.
  TensorLayout padded = TensorLayout::Contiguous(std::vector<uint64_t>{2, 3});
  padded.strides[0] = 10;
  BuiltinCall call = MakeCall("copy", ElemType::kF64);
  call.metadata = *EncodeKernelMetadata(
      {6, 6}, {padded, TensorLayout::Contiguous(std::vector<uint64_t>{2, 3})});
  st = ValidateBuiltin(call, {48, 48});
  EXPECT_THAT(st.message(), AllOf(HasSubstr("buffer 0 (in) holds 48 bytes"),
                                  HasSubstr("strides [10, 1]"), HasSubstr("= 104 bytes")));
}

TEST(ValidateTest, BufferLenBeyondBufferIsRejected) {
  BuiltinCall call = MakeCall("copy", ElemType::kF32);
  const TensorLayout t = TensorLayout::Contiguous(std::vector<uint64_t>{4});
  call.metadata = *EncodeKernelMetadata({4, 100}, {t, t});
  const absl::Status st = ValidateBuiltin(call, {16, 16});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("buffer 1 (out)"), HasSubstr("buffer_len is 100"),
                                  HasSubstr("400 bytes")));
}

TEST(ValidateTest, HugeStridesAreMeasuredExactly) {
  TensorLayout t;
  t.rank = 8;
  for (uint32_t d = 0; d < 8; ++d) {
    t.shape[d] = 2;
    t.strides[d] = 0xFFFFFFFFu;
  }
  BuiltinCall call = MakeCall("copy", ElemType::kI64);
  call.metadata =
      *EncodeKernelMetadata({1, 256}, {t, TensorLayout::Contiguous(std::vector<uint64_t>(8, 2))});
  const absl::Status st = ValidateBuiltin(call, {uint64_t{1} << 37, 2048});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  // 1 + 8 * (2^32 - 1) elements of 8 bytes.
  EXPECT_THAT(st.message(),
              AllOf(HasSubstr("buffer 0 (in) holds 137438953472 bytes"),
                    HasSubstr("spans 34359738361 i64 elements = 274877906888 bytes")));
}

TEST(ValidateTest, OutputWithOverlappingStridesIsRejected) {
  TensorLayout out = TensorLayout::Contiguous(std::vector<uint64_t>{4, 4});
  out.strides[0] = 2;  // Rows overlap.
  BuiltinCall call = MakeCall("fill", ElemType::kF32);
  call.scalars.push_back(OneScalar(ElemType::kF32, 1));
  call.metadata = *EncodeKernelMetadata({16}, {out});
  const absl::Status st = ValidateBuiltin(call, {64});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("buffer 0 (out)"), HasSubstr("more than once")));
  EXPECT_TRUE(MayOverlapItself(out));
  out.strides[0] = 4;
  EXPECT_FALSE(MayOverlapItself(out));
  out.strides[1] = 0;  // Broadcast output.
  EXPECT_TRUE(MayOverlapItself(out));
}

TEST(ValidateTest, MisalignedBufferIsRejectedAtRun) {
  std::vector<uint64_t> storage(8);
  uint8_t* base = reinterpret_cast<uint8_t*>(storage.data());
  BuiltinCall call = Call("copy", ElemType::kF32, {{4}, {4}});
  const absl::Status st =
      RunBuiltinCpu(call, {HostBuffer{base + 2, 16}, HostBuffer{base + 32, 16}});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("buffer 0 (in)"), HasSubstr("aligned")));
}

TEST(ValidateTest, OutputOverlappingAnInputIsRejectedUnlessElementwiseInPlace) {
  std::vector<float> storage(64);
  uint8_t* base = reinterpret_cast<uint8_t*>(storage.data());
  const std::vector<std::vector<uint64_t>> s = {{4, 4}, {4, 4}, {4, 4}};
  BuiltinCall call = Call("matmul", ElemType::kF32, s);
  absl::Status st =
      RunBuiltinCpu(call, {HostBuffer{base, 64}, HostBuffer{base + 64, 64}, HostBuffer{base, 64}});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("buffer 2 (out) overlaps buffer 0 (a)")));
  call.name = "add";
  EXPECT_TRUE(
      RunBuiltinCpu(call, {HostBuffer{base, 64}, HostBuffer{base + 64, 64}, HostBuffer{base, 64}})
          .ok());
  // Shifted by one element: not the same layout, so not in place.
  st = RunBuiltinCpu(call,
                     {HostBuffer{base, 64}, HostBuffer{base + 64, 64}, HostBuffer{base + 4, 64}});
  EXPECT_THAT(st.message(), HasSubstr("overlaps buffer 0 (lhs)"));
}

TEST(ValidateTest, DocumentedAddExampleEncodesAsShown) {
  // docs/kernel-abi.md, "Worked example".
  const std::vector<uint32_t> words = Meta({{2, 3}, {1, 3}, {2, 3}});
  EXPECT_EQ(words, (std::vector<uint32_t>{6,  3, 6, 6, 3, 6, 2, 2, 2, 15, 17, 19, 21, 23,
                                          25, 2, 3, 1, 3, 2, 3, 3, 1, 3,  1,  3,  1}));
  BuiltinCall call = MakeCall("add", ElemType::kF32);
  call.metadata = words;
  EXPECT_TRUE(ValidateBuiltin(call, {24, 12, 24}).ok());
}

TEST(ValidateTest, EmptyTensorsAreANoOp) {
  const std::vector<std::vector<uint64_t>> s = {{0, 3}, {0, 3}};
  BuiltinCall call = Call("exp", ElemType::kF32, s);
  EXPECT_TRUE(RunBuiltinCpu(call, {HostBuffer{nullptr, 0}, HostBuffer{nullptr, 0}}).ok());
}

// ---- Work bound (docs/kernel-abi.md, "Work bound"; docs/security.md, "Fuzzing") ------------

TensorLayout Strided(std::vector<uint64_t> shape, std::vector<uint64_t> strides) {
  TensorLayout t = TensorLayout::Contiguous(shape);
  for (size_t d = 0; d < strides.size(); ++d) t.strides[d] = strides[d];
  return t;
}

// Runs `call` with `layouts` bound to float buffers of `lens` elements (also metadata
// buffer_len); returns the status and how long the call took.
struct Timed {
  absl::Status status;
  std::chrono::steady_clock::duration took;
};
Timed RunF32(BuiltinCall call, const std::vector<TensorLayout>& layouts,
             std::vector<std::vector<float>>& buffers) {
  std::vector<uint64_t> lens;
  std::vector<HostBuffer> host;
  for (auto& b : buffers) {
    lens.push_back(b.size());
    host.push_back({reinterpret_cast<uint8_t*>(b.data()), b.size() * sizeof(float)});
  }
  call.metadata = *EncodeKernelMetadata(lens, layouts);
  const auto start = std::chrono::steady_clock::now();
  absl::Status st = RunBuiltinCpu(call, host);
  return {std::move(st), std::chrono::steady_clock::now() - start};
}

constexpr auto kQuick = std::chrono::milliseconds(500);

TEST(WorkBoundTest, DocumentedReproducerIsRefusedQuickly) {
  // docs/security.md: sum over [100000000] with stride 0 bound to one f32 (it ran 6.7 s).
  BuiltinCall call = MakeCall("sum", ElemType::kF32);
  call.metadata = {1, 1, 100000000, 1, 1, 1, 10, 11, 12, 13, 100000000, 1, 0, 1};
  std::vector<float> in = {1.0f}, out = {0.0f};
  const auto start = std::chrono::steady_clock::now();
  const absl::Status st =
      RunBuiltinCpu(call, {HostBuffer{reinterpret_cast<uint8_t*>(in.data()), 4},
                           HostBuffer{reinterpret_cast<uint8_t*>(out.data()), 4}});
  EXPECT_LT(std::chrono::steady_clock::now() - start, kQuick);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("kernel 'sum': buffer 0 (in)"),
                                  HasSubstr("shape [100000000], strides [0]"),
                                  HasSubstr("claims 100000000 elements"),
                                  HasSubstr("holds 1 f32 elements"), HasSubstr("Work bound")));
  EXPECT_EQ(out[0], 0.0f);  // Nothing ran.
}

TEST(WorkBoundTest, ReductionsMayNotRepeatTheirInput) {
  for (const char* name : {"sum", "max", "min", "mean"}) {  // argmax: the same check.
    BuiltinCall call = MakeCall(name, ElemType::kF32);
    std::vector<std::vector<float>> bufs = {{1.0f}, {0.0f}};
    const Timed t = RunF32(call, {Strided({4294967295}, {0}), TensorLayout::Contiguous({1})}, bufs);
    EXPECT_LT(t.took, kQuick) << name;
    EXPECT_EQ(t.status.code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(t.status.message(), HasSubstr("claims 4294967295 elements")) << name;
  }
  // Overlapping (non-zero) strides repeat data too: a [2000, 2000] sliding window over 3999.
  BuiltinCall sum = MakeCall("sum", ElemType::kF32);
  std::vector<std::vector<float>> w2 = {std::vector<float>(3999, 1.0f),
                                        std::vector<float>(2000, 0.0f)};
  sum.axis = 1;
  Timed t = RunF32(sum, {Strided({2000, 2000}, {1, 1}), TensorLayout::Contiguous({2000, 1})}, w2);
  EXPECT_EQ(t.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status.message(), AllOf(HasSubstr("shape [2000, 2000], strides [1, 1]"),
                                        HasSubstr("claims 4000000"), HasSubstr("holds 3999")));
  // Broadcast along kept dims, reduced along the broadcast: [B, L] strides [0, 1] is refused
  // (B copies of one sum: quadratic work from linear memory).
  std::vector<std::vector<float>> row = {std::vector<float>(1000, 1.0f),
                                         std::vector<float>(1000, 0.0f)};
  t = RunF32(sum, {Strided({1000, 1000}, {0, 1}), TensorLayout::Contiguous({1000, 1})}, row);
  EXPECT_EQ(t.status.code(), absl::StatusCode::kInvalidArgument);
}

TEST(WorkBoundTest, ReductionsOverRealDataAndSizeOneAxesRun) {
  // Transposed and stepped inputs read each element once: allowed.
  std::vector<std::vector<float>> b = {{1, 2, 3, 4, 5, 6}, {0, 0, 0}};
  BuiltinCall sum = MakeCall("sum", ElemType::kF32);
  sum.axis = 0;
  Timed t = RunF32(sum, {Strided({2, 3}, {1, 2}), TensorLayout::Contiguous({1, 3})}, b);
  ASSERT_TRUE(t.status.ok()) << t.status;
  EXPECT_EQ(b[1], (std::vector<float>{3, 7, 11}));
  // A broadcast input reduced along an axis of size 1 claims no more than out has.
  std::vector<std::vector<float>> c = {{5}, std::vector<float>(8, 0)};
  sum.axis = 1;
  t = RunF32(sum, {Strided({8, 1}, {0, 1}), TensorLayout::Contiguous({8, 1})}, c);
  ASSERT_TRUE(t.status.ok()) << t.status;
  EXPECT_EQ(c[1], std::vector<float>(8, 5));
  // A broadcast input whose buffer holds as many elements as it claims: allowed.
  std::vector<std::vector<float>> d = {std::vector<float>(6, 2), {0, 0}};
  t = RunF32(sum, {Strided({2, 3}, {0, 1}), TensorLayout::Contiguous({2, 1})}, d);
  ASSERT_TRUE(t.status.ok()) << t.status;
  EXPECT_EQ(d[1], (std::vector<float>{6, 6}));
}

TEST(WorkBoundTest, MatmulMayNotRepeatItsInnerDim) {
  // docs/security.md: a = [1, K], b = [K, N], both stride 0 from 4 bytes (K = 10^7 ran 1.2 s).
  for (uint64_t k : {uint64_t{10000000}, uint64_t{4294967295}}) {
    std::vector<std::vector<float>> b = {{1}, {1}, {0}};
    const Timed t = RunF32(
        MakeCall("matmul", ElemType::kF32),
        {Strided({1, k}, {0, 0}), Strided({k, 1}, {0, 0}), TensorLayout::Contiguous({1, 1})}, b);
    EXPECT_LT(t.took, kQuick);
    EXPECT_EQ(t.status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(t.status.message(),
                AllOf(HasSubstr("buffer 0 (a)"), HasSubstr(absl::StrCat("claims ", k)),
                      HasSubstr("holds 1 f32"), HasSubstr(absl::StrCat("K = ", k, " > N = 1"))));
    EXPECT_EQ(b[2][0], 0.0f);
  }
  // a real, b repeated: b is named.
  std::vector<std::vector<float>> b = {std::vector<float>(1000, 1), {1}, {0}};
  const Timed t = RunF32(MakeCall("matmul", ElemType::kF32),
                         {TensorLayout::Contiguous({1, 1000}), Strided({1000, 1}, {0, 0}),
                          TensorLayout::Contiguous({1, 1})},
                         b);
  EXPECT_THAT(t.status.message(), AllOf(HasSubstr("buffer 1 (b)"), HasSubstr("K = 1000 > M = 1")));
}

TEST(WorkBoundTest, MatmulOutBatchMustComeFromAnOperand) {
  // Real operands, but out's batch of 1000 repeats the same product 1000 times.
  std::vector<std::vector<float>> b = {std::vector<float>(1000, 1), std::vector<float>(1000, 1),
                                       std::vector<float>(1000, 0)};
  Timed t = RunF32(MakeCall("matmul", ElemType::kF32),
                   {TensorLayout::Contiguous({1, 1, 1000}), TensorLayout::Contiguous({1, 1000, 1}),
                    TensorLayout::Contiguous({1000, 1, 1})},
                   b);
  EXPECT_EQ(t.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status.message(), HasSubstr("out batch dim 0 is 1000"));
  // The same with both batch dims broadcast by stride 0.
  t = RunF32(MakeCall("matmul", ElemType::kF32),
             {Strided({1000, 1, 1000}, {0, 1000, 1}), Strided({1000, 1000, 1}, {0, 1, 1}),
              TensorLayout::Contiguous({1000, 1, 1})},
             b);
  EXPECT_EQ(t.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status.message(), HasSubstr("out batch dim 0 is 1000"));
}

TEST(WorkBoundTest, LegitimateMatmulBroadcastsRun) {
  // Shared weights as an expanded view: a [3, 2, 4] dense @ b [3, 4, 5] with batch stride 0.
  std::vector<float> a(24), w(20);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 7) - 3;
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 5) - 2;
  std::vector<std::vector<float>> b = {a, w, std::vector<float>(30, 0)};
  Timed t = RunF32(MakeCall("matmul", ElemType::kF32),
                   {TensorLayout::Contiguous({3, 2, 4}), Strided({3, 4, 5}, {0, 5, 1}),
                    TensorLayout::Contiguous({3, 2, 5})},
                   b);
  ASSERT_TRUE(t.status.ok()) << t.status;
  for (int bt = 0; bt < 3; ++bt) {
    for (int i = 0; i < 2; ++i) {
      for (int j = 0; j < 5; ++j) {
        float want = 0;
        for (int k = 0; k < 4; ++k) want += a[bt * 8 + i * 4 + k] * w[k * 5 + j];
        EXPECT_EQ(b[2][bt * 10 + i * 5 + j], want) << bt << " " << i << " " << j;
      }
    }
  }
  // Batch dims broadcast from both sides by size 1 (numpy's rule), and a row-broadcast a whose
  // K does not exceed N.
  const std::vector<std::vector<uint64_t>> s = {{2, 1, 5, 3}, {1, 4, 3, 2}, {2, 4, 5, 2}};
  EXPECT_TRUE(ValidateBuiltin(Call("matmul", ElemType::kF32, s), Bytes(s)).ok());
  std::vector<std::vector<float>> r = {{1, 2}, {1, 0, 0, 0, 1, 0}, std::vector<float>(12, 0)};
  t = RunF32(
      MakeCall("matmul", ElemType::kF32),
      {Strided({4, 2}, {0, 1}), TensorLayout::Contiguous({2, 3}), TensorLayout::Contiguous({4, 3})},
      r);
  ASSERT_TRUE(t.status.ok()) << t.status;
  EXPECT_EQ(r[2], (std::vector<float>{1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0}));
}

TEST(WorkBoundTest, ElementwiseBroadcastsAndWindowsStillRun) {
  // numpy-style: a scalar and a row vector expanded by stride 0 to the output's [4, 5].
  std::vector<std::vector<float>> b = {{10}, {0, 1, 2, 3, 4}, std::vector<float>(20, 0)};
  Timed t = RunF32(
      MakeCall("add", ElemType::kF32),
      {Strided({4, 5}, {0, 0}), Strided({4, 5}, {0, 1}), TensorLayout::Contiguous({4, 5})}, b);
  ASSERT_TRUE(t.status.ok()) << t.status;
  for (int i = 0; i < 20; ++i) EXPECT_EQ(b[2][i], 10.0f + static_cast<float>(i % 5));
  // An overlapping (sliding-window) input: the work is the output's, which must be real.
  std::vector<std::vector<float>> c = {{0, 1, 2, 3, 4, 5}, std::vector<float>(12, 0)};
  t = RunF32(MakeCall("copy", ElemType::kF32),
             {Strided({4, 3}, {1, 1}), TensorLayout::Contiguous({4, 3})}, c);
  ASSERT_TRUE(t.status.ok()) << t.status;
  EXPECT_EQ(c[1], (std::vector<float>{0, 1, 2, 1, 2, 3, 2, 3, 4, 3, 4, 5}));
  // softmax rows of a broadcast input.
  std::vector<std::vector<float>> d = {{1, 1}, std::vector<float>(6, 0)};
  t = RunF32(MakeCall("softmax", ElemType::kF32),
             {Strided({3, 2}, {0, 1}), TensorLayout::Contiguous({3, 2})}, d);
  ASSERT_TRUE(t.status.ok()) << t.status;
  EXPECT_EQ(d[1], std::vector<float>(6, 0.5f));
}

}  // namespace
}  // namespace cubed::kernels::testing
