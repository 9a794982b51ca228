#include "kernels/validated_calls.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/builtin.h"
#include "kernels/builtin_test_util.h"
#include "kernels/validate.h"

namespace cubed::kernels::testing {
namespace {

using Shapes = std::vector<std::vector<uint64_t>>;

// The same decoded metadata as ValidateCall's.
void ExpectSameMeta(const KernelMetadata& got, const KernelMetadata& want) {
  EXPECT_EQ(got.buffer_len, want.buffer_len);
  EXPECT_EQ(got.logical_len, want.logical_len);
  ASSERT_EQ(got.tensors.size(), want.tensors.size());
  for (size_t i = 0; i < got.tensors.size(); ++i) {
    EXPECT_EQ(got.tensors[i].rank, want.tensors[i].rank);
    EXPECT_EQ(got.tensors[i].shape, want.tensors[i].shape);
    EXPECT_EQ(got.tensors[i].strides, want.tensors[i].strides);
  }
}

TEST(ValidatedCallsTest, AnEqualCallTakesTheKeptResult) {
  const Shapes s = {{2, 3}, {1, 3}, {2, 3}};
  const BuiltinCall call = ContiguousCall("add", ElemType::kF32, s);
  const std::vector<uint64_t> bytes = ContiguousBytes(s);
  ValidatedCalls calls;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<const ValidatedCall*> v = calls.Validate(call, bytes);
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ((*v)->def, *FindKernel("add", 3));
    absl::StatusOr<KernelMetadata> want = ValidateCall(**FindKernel("add", 3), call, bytes);
    ASSERT_TRUE(want.ok());
    ExpectSameMeta((*v)->meta, *want);
  }
  EXPECT_EQ(calls.misses(), 1u);
  EXPECT_EQ(calls.hits(), 2u);
}

// What a kept result must never answer: the same call with anything ValidateCall reads changed
// is validated again, so a change that makes it invalid is refused.
TEST(ValidatedCallsTest, AnyDifferenceValidatesAgainAndFailuresAreNotKept) {
  const Shapes s = {{4}, {4}, {4}};
  const BuiltinCall good = ContiguousCall("add", ElemType::kF32, s);
  const std::vector<uint64_t> bytes = ContiguousBytes(s);
  ValidatedCalls calls;
  ASSERT_TRUE(calls.Validate(good, bytes).ok());

  std::vector<uint64_t> small = bytes;
  small[2] = 8;  // The output no longer fits its buffer.
  EXPECT_EQ(calls.Validate(good, small).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(calls.Validate(good, small).status().code(), absl::StatusCode::kInvalidArgument);

  BuiltinCall other = good;
  other.dtype = ElemType::kBool;  // add has no bool.
  EXPECT_EQ(calls.Validate(other, bytes).status().code(), absl::StatusCode::kInvalidArgument);
  other = good;
  other.name = "frobnicate";
  EXPECT_EQ(calls.Validate(other, bytes).status().code(), absl::StatusCode::kNotFound);
  other = good;
  other.metadata[0] = 1000;  // buffer_len of the lhs beyond its 16 bytes.
  EXPECT_EQ(calls.Validate(other, bytes).status().code(), absl::StatusCode::kInvalidArgument);
  other = good;
  other.allow_tf32 = true;  // Not for add.
  EXPECT_EQ(calls.Validate(other, bytes).status().code(), absl::StatusCode::kInvalidArgument);
  other = good;
  other.scalars.push_back(OneScalar(ElemType::kF32, 1.0));  // add takes none.
  EXPECT_EQ(calls.Validate(other, bytes).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      calls.Validate(good, std::vector<uint64_t>(bytes.begin(), bytes.end() - 1)).status().code(),
      absl::StatusCode::kInvalidArgument);  // A buffer fewer.

  EXPECT_EQ(calls.hits(), 0u);
  ASSERT_TRUE(calls.Validate(good, bytes).ok());  // The good call is still kept.
  EXPECT_EQ(calls.hits(), 1u);
}

TEST(ValidatedCallsTest, ScalarsAndAxisAreKeys) {
  const Shapes s = {{4}, {4}};
  BuiltinCall fill = ContiguousCall("fill", ElemType::kF32, {{4}});
  fill.scalars = {OneScalar(ElemType::kF32, 1.0)};
  ValidatedCalls calls;
  const std::vector<uint64_t> bytes = {16};
  ASSERT_TRUE(calls.Validate(fill, bytes).ok());
  fill.scalars = {OneScalar(ElemType::kF32, 2.0)};
  ASSERT_TRUE(calls.Validate(fill, bytes).ok());
  EXPECT_EQ(calls.misses(), 2u);                    // Another value is another call.
  fill.scalars = {OneScalar(ElemType::kF64, 2.0)};  // fill of f32 takes an f32.
  EXPECT_FALSE(calls.Validate(fill, bytes).ok());

  BuiltinCall sum = ContiguousCall("sum", ElemType::kF32, {{2, 3}, {1, 3}});
  const std::vector<uint64_t> sum_bytes = ContiguousBytes({{2, 3}, {1, 3}});
  ASSERT_TRUE(calls.Validate(sum, sum_bytes).ok());
  sum.axis = 1;  // Reducing axis 1 of [2, 3] needs an output of [2, 1].
  EXPECT_EQ(calls.Validate(sum, sum_bytes).status().code(), absl::StatusCode::kInvalidArgument);
}

// Note [Validated calls]: a model's step cycles through tens of distinct calls; every one is
// kept (eight kept round robin missed every call of a cycle of nine or more).
TEST(ValidatedCallsTest, ACycleOfManyCallsHitsFromItsSecondRound) {
  ValidatedCalls calls;
  constexpr uint64_t kCalls = 40;
  std::vector<BuiltinCall> fills;
  for (uint64_t n = 1; n <= kCalls; ++n) {
    fills.push_back(ContiguousCall("fill", ElemType::kF32, {{n}}));
  }
  for (BuiltinCall& f : fills) f.scalars = {OneScalar(ElemType::kF32, 0.0)};
  auto bytes = [](uint64_t n) { return std::vector<uint64_t>{4 * n}; };
  for (int round = 0; round < 3; ++round) {
    for (uint64_t n = 1; n <= kCalls; ++n) {
      absl::StatusOr<const ValidatedCall*> v = calls.Validate(fills[n - 1], bytes(n));
      ASSERT_TRUE(v.ok()) << v.status();
      EXPECT_EQ((*v)->meta.tensors.at(0).shape.at(0), n);  // Its own result, not another's.
    }
  }
  EXPECT_EQ(calls.misses(), kCalls);
  EXPECT_EQ(calls.hits(), 2 * kCalls);
}

TEST(ValidatedCallsTest, PastItsBoundEverythingKeptIsDropped) {
  ValidatedCalls calls;
  BuiltinCall fill = ContiguousCall("fill", ElemType::kF32, {{1}});
  fill.scalars = {OneScalar(ElemType::kF32, 0.0)};
  auto bytes = [](uint64_t n) { return std::vector<uint64_t>{4 * n}; };
  // The same call on buffers of more bytes than it needs: kMaxEntries + 1 distinct keys.
  for (uint64_t n = 1; n <= ValidatedCalls::kMaxEntries + 1; ++n) {
    ASSERT_TRUE(calls.Validate(fill, bytes(n)).ok());
  }
  EXPECT_EQ(calls.misses(), ValidatedCalls::kMaxEntries + 1);
  ASSERT_TRUE(calls.Validate(fill, bytes(ValidatedCalls::kMaxEntries + 1)).ok());  // Kept.
  EXPECT_EQ(calls.hits(), 1u);
  ASSERT_TRUE(calls.Validate(fill, bytes(1)).ok());  // Dropped with the rest.
  EXPECT_EQ(calls.misses(), ValidatedCalls::kMaxEntries + 2);
}

// Note [Prepared launches]: what a backend keeps beside a call lives as long as the call: an
// equal call finds it, a different one starts from a value-initialized one, and it goes when
// everything kept is dropped.
TEST(ValidatedCallsTest, WhatABackendPreparedStaysWithItsCall) {
  struct Prepared {
    int launches = 0;
  };
  ValidatedCallsWith<Prepared> calls;
  BuiltinCall fill = ContiguousCall("fill", ElemType::kF32, {{4}});
  fill.scalars = {OneScalar(ElemType::kF32, 0.0)};
  const std::vector<uint64_t> bytes = {16};
  for (int i = 1; i <= 3; ++i) {
    absl::StatusOr<ValidatedCallsWith<Prepared>::Kept*> kept = calls.Validate(fill, bytes);
    ASSERT_TRUE(kept.ok()) << kept.status();
    EXPECT_EQ((*kept)->prepared.launches, i - 1);
    ++(*kept)->prepared.launches;
  }
  absl::StatusOr<ValidatedCallsWith<Prepared>::Kept*> other =
      calls.Validate(fill, std::vector<uint64_t>{32});
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ((*other)->prepared.launches, 0);
  for (uint64_t n = 3; n <= ValidatedCallsWith<Prepared>::kMaxEntries + 1; ++n) {
    ASSERT_TRUE(calls.Validate(fill, std::vector<uint64_t>{16 * n}).ok());
  }
  absl::StatusOr<ValidatedCallsWith<Prepared>::Kept*> again = calls.Validate(fill, bytes);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->prepared.launches, 0);  // Dropped with the rest, kept anew.
}

}  // namespace
}  // namespace cubed::kernels::testing
