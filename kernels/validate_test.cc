#include "kernels/validate.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/kernel_metadata.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/builtin.h"
#include "kernels/builtin_test_util.h"

namespace cubed::kernels::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(ValidateTest, NamesAreSortedUniqueAndComplete) {
  const std::vector<std::string> names = BuiltinKernelNames();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());
  for (const char* n :
       {"fill",    "copy", "cast",   "neg",    "abs",     "relu", "exp",       "log",  "sqrt",
        "sigmoid", "tanh", "add",    "sub",    "mul",     "div",  "max",       "min",  "pow",
        "sum",     "mean", "argmax", "matmul", "softmax", "gelu", "gelu_tanh", "silu", "eq",
        "ne",      "lt",   "le",     "gt",     "ge",      "where"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  }
  for (const char* n : {"layer_norm", "rms_norm", "gather", "causal_softmax", "causal_attention"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  }
  EXPECT_EQ(names.size(), 38u);
}

TEST(ValidateTest, ValidCallPasses) {
  const std::vector<std::vector<uint64_t>> s = {{2, 3}, {1, 3}, {2, 3}};
  EXPECT_TRUE(ValidateBuiltin(ContiguousCall("add", ElemType::kF32, s), ContiguousBytes(s)).ok());
}

TEST(ValidateTest, UnknownKernelIsNotFound) {
  const absl::Status st = ValidateBuiltin(ContiguousCall("frobnicate", ElemType::kF32, {{1}}), {4});
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(st.message(), HasSubstr("'frobnicate'"));
}

TEST(ValidateTest, UnsupportedDtypeNamesKernelAndDtype) {
  const std::vector<std::vector<uint64_t>> s = {{4}, {4}};
  const absl::Status st =
      ValidateBuiltin(ContiguousCall("exp", ElemType::kI32, s), ContiguousBytes(s));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("'exp'"), HasSubstr("i32"), HasSubstr("f32, f64")));
}

TEST(ValidateTest, UnknownDtypeValue) {
  const std::vector<std::vector<uint64_t>> s = {{4}, {4}};
  BuiltinCall call = ContiguousCall("cast", ElemType::kF32, s);
  call.out_dtype = static_cast<ElemType>(77);
  const absl::Status st = ValidateBuiltin(call, ContiguousBytes(s));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("out_dtype 77"));
}

TEST(ValidateTest, WrongBufferCount) {
  const std::vector<std::vector<uint64_t>> s = {{4}, {4}};
  absl::Status st = ValidateBuiltin(ContiguousCall("add", ElemType::kF32, s), ContiguousBytes(s));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "kernel 'add' takes 3 buffers (lhs, rhs, out), got 2");
  // "max" is a reduction with 2 buffers and elementwise with 3.
  st = ValidateBuiltin(ContiguousCall("max", ElemType::kF32, {{1}}), {4});
  EXPECT_EQ(st.message(),
            "kernel 'max' takes 2 buffers (in, out) or 3 buffers (lhs, rhs, out), got 1");
}

TEST(ValidateTest, MalformedMetadata) {
  const std::vector<std::vector<uint64_t>> s = {{4}, {4}};
  BuiltinCall call = ContiguousCall("copy", ElemType::kF32, s);
  call.metadata.resize(5);
  const absl::Status st = ValidateBuiltin(call, ContiguousBytes(s));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("'copy'"), HasSubstr("metadata")));
}

TEST(ValidateTest, ShapeMismatchNamesTheDims) {
  std::vector<std::vector<uint64_t>> s = {{2, 3}, {3, 2}};
  absl::Status st = ValidateBuiltin(ContiguousCall("copy", ElemType::kF32, s), ContiguousBytes(s));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("[3, 2]"), HasSubstr("[2, 3]"), HasSubstr("dim 0")));
  s = {{2, 3}, {2, 2}, {2, 4}};
  st = ValidateBuiltin(ContiguousCall("mul", ElemType::kF32, s), ContiguousBytes(s));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("lhs shape [2, 3]"), HasSubstr("dim 1 is 3"),
                                  HasSubstr("must be 4 or 1")));
  s = {{3}, {2, 3}, {2, 3}};
  st = ValidateBuiltin(ContiguousCall("add", ElemType::kF32, s), ContiguousBytes(s));
  EXPECT_THAT(st.message(), AllOf(HasSubstr("lhs has rank 1"), HasSubstr("out has rank 2")));
}

TEST(ValidateTest, MatmulShapeErrors) {
  std::vector<std::vector<uint64_t>> s = {{2, 3}, {4, 5}, {2, 5}};
  absl::Status st =
      ValidateBuiltin(ContiguousCall("matmul", ElemType::kF32, s), ContiguousBytes(s));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("K = 3"), HasSubstr("(4)")));
  s = {{2, 3}, {3, 5}, {2, 4}};
  st = ValidateBuiltin(ContiguousCall("matmul", ElemType::kF32, s), ContiguousBytes(s));
  EXPECT_THAT(st.message(), HasSubstr("[M, N] = [2, 5]"));
  s = {{3}, {3}, {1}};
  st = ValidateBuiltin(ContiguousCall("matmul", ElemType::kF32, s), ContiguousBytes(s));
  EXPECT_THAT(st.message(), HasSubstr("needs rank >= 2"));
  s = {{2, 2, 3}, {3, 3, 5}, {2, 2, 5}};
  st = ValidateBuiltin(ContiguousCall("matmul", ElemType::kF32, s), ContiguousBytes(s));
  EXPECT_THAT(st.message(), AllOf(HasSubstr("b shape [3, 3, 5]"), HasSubstr("dim 0 is 3")));
}

TEST(ValidateTest, AllowTf32IsForMatmulOfF32Only) {
  const std::vector<std::vector<uint64_t>> mm = {{2, 3}, {3, 5}, {2, 5}};
  BuiltinCall call = ContiguousCall("matmul", ElemType::kF32, mm);
  call.allow_tf32 = true;
  EXPECT_TRUE(ValidateBuiltin(call, ContiguousBytes(mm)).ok());
  call = ContiguousCall("matmul", ElemType::kBF16, mm);
  call.allow_tf32 = true;
  absl::Status st = ValidateBuiltin(call, ContiguousBytes(mm, 2));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("allow_tf32"), HasSubstr("matmul of bf16")));
  const std::vector<std::vector<uint64_t>> add = {{4}, {4}, {4}};
  call = ContiguousCall("add", ElemType::kF32, add);
  call.allow_tf32 = true;
  st = ValidateBuiltin(call, ContiguousBytes(add));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("kernel 'add'"), HasSubstr("allow_tf32")));
}

TEST(ValidateTest, ReductionAxisAndShape) {
  std::vector<std::vector<uint64_t>> s = {{2, 3}, {2, 1}};
  BuiltinCall call = ContiguousCall("sum", ElemType::kF32, s);
  call.axis = 2;
  absl::Status st = ValidateBuiltin(call, ContiguousBytes(s));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("axis 2"), HasSubstr("rank 2")));
  call.axis = 0;
  st = ValidateBuiltin(call, ContiguousBytes(s));
  EXPECT_THAT(st.message(), AllOf(HasSubstr("out dim 0 is 2, must be 1")));
  s = {{2, 0}, {2, 1}};
  call = ContiguousCall("max", ElemType::kF32, s);
  call.axis = 1;
  st = ValidateBuiltin(call, ContiguousBytes(s));
  EXPECT_THAT(st.message(), HasSubstr("cannot reduce axis 1 of size 0"));
  s = {{2, 3}, {2, 1}};
  call = ContiguousCall("argmax", ElemType::kF32, s);
  call.axis = 1;
  EXPECT_THAT(ValidateBuiltin(call, ContiguousBytes(s)).message(),
              HasSubstr("buffer 1 (out) holds 8 bytes"))
      << "argmax writes i64";
  EXPECT_TRUE(ValidateBuiltin(call, {24, 16}).ok());
}

TEST(ValidateTest, ComparisonsWriteBoolOfAnyInputType) {
  const std::vector<std::vector<uint64_t>> s = {{2, 3}, {1, 3}, {2, 3}};
  for (ElemType t : kAllElemTypes) {
    BuiltinCall call = ContiguousCall("le", t, s);
    const uint32_t es = ElemSize(t);
    EXPECT_TRUE(ValidateBuiltin(call, {6 * es, 3 * es, 6}).ok()) << ElemTypeName(t);
    const absl::Status st = ValidateBuiltin(call, {6 * es, 3 * es, 5});
    EXPECT_THAT(st.message(), AllOf(HasSubstr("buffer 2 (out) holds 5 bytes"),
                                    HasSubstr("spans 6 bool elements = 6 bytes")));
    auto buffers = BuiltinBufferTypes(call, 3);
    ASSERT_TRUE(buffers.ok()) << buffers.status();
    EXPECT_EQ(buffers->count, 3u);
    EXPECT_EQ(buffers->types[0], t);
    EXPECT_EQ(buffers->types[1], t);
    EXPECT_EQ(buffers->types[2], ElemType::kBool);
    EXPECT_TRUE(buffers->in_place);
  }
  EXPECT_EQ(BuiltinBufferTypes(MakeCall("eq", ElemType::kF32), 2).status().message(),
            "kernel 'eq' takes 3 buffers (lhs, rhs, out), got 2");
  EXPECT_EQ(BuiltinBufferTypes(MakeCall("argmax", ElemType::kF32), 2)->types[1], ElemType::kI64);
  BuiltinCall cast = MakeCall("cast", ElemType::kF32);
  cast.out_dtype = ElemType::kU8;
  EXPECT_EQ(BuiltinBufferTypes(cast, 2)->types[1], ElemType::kU8);
  EXPECT_FALSE(BuiltinBufferTypes(MakeCall("sum", ElemType::kF32), 2)->in_place);
}

TEST(ValidateTest, ScalarCountAndType) {
  const std::vector<std::vector<uint64_t>> s = {{4}};
  BuiltinCall call = ContiguousCall("fill", ElemType::kF32, s);
  absl::Status st = ValidateBuiltin(call, ContiguousBytes(s));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("exactly one scalar group"), HasSubstr("got 0")));
  call.scalars.push_back(OneScalar(ElemType::kI32, 1));
  st = ValidateBuiltin(call, ContiguousBytes(s));
  EXPECT_THAT(st.message(), HasSubstr("scalar group is i32 but the dtype is f32"));
  call.scalars[0] = OneScalar(ElemType::kF32, 1);
  call.scalars[0].bytes.push_back(0);
  st = ValidateBuiltin(call, ContiguousBytes(s));
  EXPECT_THAT(st.message(), HasSubstr("holds 5 bytes"));
  const std::vector<std::vector<uint64_t>> s2 = {{4}, {4}};
  call = ContiguousCall("neg", ElemType::kF32, s2);
  call.scalars.push_back(OneScalar(ElemType::kF32, 1));
  st = ValidateBuiltin(call, ContiguousBytes(s2));
  EXPECT_THAT(st.message(), HasSubstr("'neg' takes no scalars"));
}

BuiltinCall NormCall(std::string name, ElemType dt, const std::vector<std::vector<uint64_t>>& s) {
  BuiltinCall call = ContiguousCall(std::move(name), dt, s);
  call.scalars.push_back(OneScalar(ElemType::kF64, 1e-5));
  return call;
}

TEST(ValidateTest, NormsTakeOneBufferCountPerAffineVariant) {
  for (const std::vector<std::vector<uint64_t>>& s :
       std::vector<std::vector<std::vector<uint64_t>>>{
           {{2, 7}, {2, 7}}, {{2, 7}, {7}, {2, 7}}, {{2, 7}, {7}, {7}, {2, 7}}}) {
    const absl::Status st =
        ValidateBuiltin(NormCall("layer_norm", ElemType::kBF16, s), ContiguousBytes(s, 2));
    EXPECT_TRUE(st.ok()) << st;
  }
  std::vector<std::vector<uint64_t>> s = {{2, 7}, {7}, {7}, {7}, {2, 7}};
  absl::Status st = ValidateBuiltin(NormCall("layer_norm", ElemType::kF32, s), ContiguousBytes(s));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "kernel 'layer_norm' takes 2 buffers (in, out) or 3 buffers (in, weight, out) or 4 "
            "buffers (in, weight, bias, out), got 5");
  s = {{2, 7}, {7}, {7}, {2, 7}};
  st = ValidateBuiltin(NormCall("rms_norm", ElemType::kF32, s), ContiguousBytes(s));
  EXPECT_EQ(st.message(),
            "kernel 'rms_norm' takes 2 buffers (in, out) or 3 buffers (in, weight, out), got 4");
}

TEST(ValidateTest, CausalSoftmaxTakesAFiniteScaleAndRankTwo) {
  std::vector<std::vector<uint64_t>> s = {{2, 5, 7}, {2, 5, 7}};
  BuiltinCall call = ContiguousCall("causal_softmax", ElemType::kBF16, s);
  call.scalars.push_back(OneScalar(ElemType::kF32, 0.125));  // f32 or f64 for any dtype.
  EXPECT_TRUE(ValidateBuiltin(call, ContiguousBytes(s, 2)).ok());
  call.scalars = {OneScalar(ElemType::kF64, -3.0)};  // Any finite scale.
  EXPECT_TRUE(ValidateBuiltin(call, ContiguousBytes(s, 2)).ok());
  call.scalars.clear();
  absl::Status st = ValidateBuiltin(call, ContiguousBytes(s, 2));
  EXPECT_EQ(st.message(),
            "kernel 'causal_softmax': takes exactly one scalar group (scale, one f32 or f64 "
            "value), got 0");
  call.scalars = {OneScalar(ElemType::kBF16, 0.5)};
  st = ValidateBuiltin(call, ContiguousBytes(s, 2));
  EXPECT_THAT(st.message(), HasSubstr("the scale scalar group is bf16; it must be f32 or f64"));
  for (double bad : {std::nan(""), HUGE_VAL, -HUGE_VAL}) {
    call.scalars = {OneScalar(ElemType::kF64, bad)};
    st = ValidateBuiltin(call, ContiguousBytes(s, 2));
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(st.message(), HasSubstr("; it must be finite")) << bad;
  }
  s = {{7}, {7}};  // A vector has no queries.
  call = ContiguousCall("causal_softmax", ElemType::kF32, s);
  call.scalars.push_back(OneScalar(ElemType::kF64, 1.0));
  st = ValidateBuiltin(call, ContiguousBytes(s));
  EXPECT_THAT(st.message(), HasSubstr("in has rank 1, needs rank >= 2"));
  s = {{2, 5, 7}, {2, 7, 5}};
  call = ContiguousCall("causal_softmax", ElemType::kF32, s);
  call.scalars.push_back(OneScalar(ElemType::kF64, 1.0));
  st = ValidateBuiltin(call, ContiguousBytes(s));
  EXPECT_THAT(st.message(), HasSubstr("differs from in shape"));
  call = ContiguousCall("causal_softmax", ElemType::kI32, {{2, 2}, {2, 2}});
  call.scalars.push_back(OneScalar(ElemType::kF64, 1.0));
  st = ValidateBuiltin(call, ContiguousBytes({{2, 2}, {2, 2}}));
  EXPECT_EQ(st.message(),
            "kernel 'causal_softmax' does not support dtype i32 (supported: f32, f64, f16, bf16)");
}

TEST(ValidateTest, CausalAttentionShapes) {
  std::vector<std::vector<uint64_t>> s = {{2, 3, 5, 8}, {1, 3, 7, 8}, {1, 3, 7, 4}, {2, 3, 5, 4}};
  auto call = [&](ElemType dt) {
    BuiltinCall c = ContiguousCall("causal_attention", dt, s);
    c.scalars.push_back(OneScalar(ElemType::kF32, 0.125));
    return c;
  };
  EXPECT_TRUE(ValidateBuiltin(call(ElemType::kBF16), ContiguousBytes(s, 2)).ok());
  EXPECT_TRUE(ValidateBuiltin(call(ElemType::kF64), ContiguousBytes(s, 8)).ok());
  BuiltinCall c = call(ElemType::kF32);
  c.scalars.clear();
  EXPECT_THAT(ValidateBuiltin(c, ContiguousBytes(s)).message(),
              HasSubstr("takes exactly one scalar group (scale"));
  EXPECT_EQ(ValidateBuiltin(call(ElemType::kI32), ContiguousBytes(s)).message(),
            "kernel 'causal_attention' does not support dtype i32 (supported: f32, f64, f16, "
            "bf16)");
  const std::vector<std::vector<uint64_t>> good = s;
  s[1] = {1, 3, 7, 9};
  EXPECT_EQ(ValidateBuiltin(call(ElemType::kF32), ContiguousBytes(s)).message(),
            "kernel 'causal_attention': q shape [2, 3, 5, 8] and k shape [1, 3, 7, 9] differ in "
            "their last dim (E): queries and keys must have the same length");
  s = good;
  s[2] = {1, 3, 6, 4};
  EXPECT_EQ(ValidateBuiltin(call(ElemType::kF32), ContiguousBytes(s)).message(),
            "kernel 'causal_attention': k shape [1, 3, 7, 8] and v shape [1, 3, 6, 4] differ in "
            "dim 2 (S): every key needs one value");
  s = good;
  s[3] = {2, 3, 5, 8};
  EXPECT_EQ(ValidateBuiltin(call(ElemType::kF32), ContiguousBytes(s)).message(),
            "kernel 'causal_attention': out shape [2, 3, 5, 8] must end in [L, Ev] = [5, 4] for "
            "q shape [2, 3, 5, 8] and v shape [1, 3, 7, 4]");
  s = good;
  s[1] = {2, 2, 7, 8};
  EXPECT_THAT(ValidateBuiltin(call(ElemType::kF32), ContiguousBytes(s)).message(),
              HasSubstr("k shape [2, 2, 7, 8] does not broadcast to out shape [2, 3, 5, 4]"));
  s = {{5, 8}, {7, 8}, {7, 4}, {5, 4, 1}};
  EXPECT_THAT(ValidateBuiltin(call(ElemType::kF32), ContiguousBytes(s)).message(),
              HasSubstr("ranks must be equal"));
  s = {{8}, {8}, {8}, {8}};
  EXPECT_THAT(ValidateBuiltin(call(ElemType::kF32), ContiguousBytes(s)).message(),
              HasSubstr("q has rank 1, needs rank >= 2"));
}

TEST(ValidateTest, NormShapesDtypesAndEps) {
  std::vector<std::vector<uint64_t>> s = {{2, 7}, {5}, {7}, {2, 7}};
  absl::Status st = ValidateBuiltin(NormCall("layer_norm", ElemType::kF32, s), ContiguousBytes(s));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "kernel 'layer_norm': weight shape [5] must be [7]: 1-D, the length of in's last dim "
            "(in shape [2, 7])");
  s = {{2, 7}, {7}, {1, 7}, {2, 7}};
  st = ValidateBuiltin(NormCall("layer_norm", ElemType::kF32, s), ContiguousBytes(s));
  EXPECT_THAT(st.message(), HasSubstr("bias shape [1, 7] must be [7]"));
  s = {{2, 7}, {2, 6}};
  st = ValidateBuiltin(NormCall("rms_norm", ElemType::kF32, s), ContiguousBytes(s));
  EXPECT_THAT(st.message(), AllOf(HasSubstr("out shape [2, 6] differs from in shape [2, 7]"),
                                  HasSubstr("dim 1")));
  s = {{14}, {2, 7}};
  st = ValidateBuiltin(NormCall("rms_norm", ElemType::kF32, s), ContiguousBytes(s));
  EXPECT_THAT(st.message(), HasSubstr("in has rank 1 but out has rank 2"));
  s = {{}, {}};
  st = ValidateBuiltin(NormCall("rms_norm", ElemType::kF32, s), ContiguousBytes(s));
  EXPECT_THAT(st.message(), HasSubstr("in has rank 0, needs rank >= 1"));
  s = {{2, 7}, {7}, {2, 7}};
  st = ValidateBuiltin(NormCall("rms_norm", ElemType::kI32, s), ContiguousBytes(s));
  EXPECT_EQ(st.message(),
            "kernel 'rms_norm' does not support dtype i32 (supported: f32, f64, f16, bf16)");

  BuiltinCall call = NormCall("rms_norm", ElemType::kF16, s);
  EXPECT_TRUE(ValidateBuiltin(call, ContiguousBytes(s, 2)).ok());
  call.scalars[0] = OneScalar(ElemType::kF32, 0.0);  // f32 eps for any dtype; 0 is allowed.
  EXPECT_TRUE(ValidateBuiltin(call, ContiguousBytes(s, 2)).ok());
  call.scalars.clear();
  st = ValidateBuiltin(call, ContiguousBytes(s, 2));
  EXPECT_EQ(st.message(),
            "kernel 'rms_norm': takes exactly one scalar group (eps, one f32 or f64 value), got 0");
  call.scalars = {OneScalar(ElemType::kF16, 1e-3)};
  st = ValidateBuiltin(call, ContiguousBytes(s, 2));
  EXPECT_THAT(st.message(), HasSubstr("the eps scalar group is f16; it must be f32 or f64"));
  call.scalars = {OneScalar(ElemType::kF64, 1e-3)};
  call.scalars[0].bytes.resize(16);
  st = ValidateBuiltin(call, ContiguousBytes(s, 2));
  EXPECT_THAT(st.message(), HasSubstr("holds 16 bytes, expected exactly one f64 value (8 bytes)"));
  for (double bad : {-1e-5, std::nan(""), HUGE_VAL}) {
    call.scalars = {OneScalar(ElemType::kF64, bad)};
    st = ValidateBuiltin(call, ContiguousBytes(s, 2));
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(st.message(), HasSubstr("must be finite and >= 0")) << bad;
  }
}

TEST(ValidateTest, BufferTooSmallForLayoutNamesBufferAndSizes) {
  const std::vector<std::vector<uint64_t>> s = {{2, 3}, {2, 3}, {2, 3}};
  absl::Status st = ValidateBuiltin(ContiguousCall("add", ElemType::kF32, s), {24, 20, 24});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("buffer 1 (rhs) holds 20 bytes"),
                                  HasSubstr("spans 6 f32 elements = 24 bytes")));
  // A padded layout needs its whole span, not just its element count.
  TensorLayout padded = TensorLayout::Contiguous(std::vector<uint64_t>{2, 3});
  padded.strides[0] = 10;
  BuiltinCall call = MakeCall("copy", ElemType::kF64);
  call.metadata = kernels::ToMetadataWords(*EncodeKernelMetadata(
      {6, 6}, {padded, TensorLayout::Contiguous(std::vector<uint64_t>{2, 3})}));
  st = ValidateBuiltin(call, {48, 48});
  EXPECT_THAT(st.message(), AllOf(HasSubstr("buffer 0 (in) holds 48 bytes"),
                                  HasSubstr("strides [10, 1]"), HasSubstr("= 104 bytes")));
}

TEST(ValidateTest, BufferLenBeyondBufferIsRejected) {
  BuiltinCall call = MakeCall("copy", ElemType::kF32);
  const TensorLayout t = TensorLayout::Contiguous(std::vector<uint64_t>{4});
  call.metadata = kernels::ToMetadataWords(*EncodeKernelMetadata({4, 100}, {t, t}));
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
  call.metadata = kernels::ToMetadataWords(
      *EncodeKernelMetadata({1, 256}, {t, TensorLayout::Contiguous(std::vector<uint64_t>(8, 2))}));
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
  call.metadata = kernels::ToMetadataWords(*EncodeKernelMetadata({16}, {out}));
  const absl::Status st = ValidateBuiltin(call, {64});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("buffer 0 (out)"), HasSubstr("more than once")));
  EXPECT_TRUE(MayOverlapItself(out));
  out.strides[0] = 4;
  EXPECT_FALSE(MayOverlapItself(out));
  out.strides[1] = 0;  // Broadcast output.
  EXPECT_TRUE(MayOverlapItself(out));
}

TEST(ValidateTest, DocumentedAddExampleEncodesAsShown) {
  // docs/kernel-abi.md, "Worked example".
  const std::vector<uint32_t> words = ContiguousMetadata({{2, 3}, {1, 3}, {2, 3}});
  EXPECT_EQ(words, (std::vector<uint32_t>{6,  3, 6, 6, 3, 6, 2, 2, 2, 15, 17, 19, 21, 23,
                                          25, 2, 3, 1, 3, 2, 3, 3, 1, 3,  1,  3,  1}));
  BuiltinCall call = MakeCall("add", ElemType::kF32);
  call.metadata = kernels::ToMetadataWords(words);
  EXPECT_TRUE(ValidateBuiltin(call, {24, 12, 24}).ok());
}

}  // namespace
}  // namespace cubed::kernels::testing
