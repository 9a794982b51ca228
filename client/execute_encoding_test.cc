#include "client/execute_encoding.h"

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "client/handle_state.h"
#include "client/proto_conversion.h"
#include "cubed/v1/session.pb.h"
#include "gtest/gtest.h"

namespace cubed {
namespace {

// A binding of a fake handle that is never released (no batcher).
Binding FakeBinding(uint64_t id, uint64_t start = 0, uint64_t end = 0) {
  return Binding(Handle(std::make_shared<Handle::State>(id, 64, nullptr)), start, end);
}

// The reference: the command built as protobuf messages and serialized.
std::string Reference(const BuiltinKernel& kernel, CubeCount count,
                      const std::vector<Binding>& buffers, const std::vector<uint32_t>& metadata,
                      const std::vector<Scalars>& scalars, ExecutionMode mode) {
  v1::Command command;
  v1::Command::Execute& e = *command.mutable_execute();
  ToProto(kernel, e.mutable_kernel()->mutable_builtin());
  e.mutable_count()->mutable_static_count()->set_x(count.x);
  e.mutable_count()->mutable_static_count()->set_y(count.y);
  e.mutable_count()->mutable_static_count()->set_z(count.z);
  v1::Bindings& b = *e.mutable_bindings();
  for (const Binding& binding : buffers) EXPECT_TRUE(ToProto(binding, b.add_buffers()).ok());
  b.mutable_metadata()->Add(metadata.begin(), metadata.end());
  for (const Scalars& s : scalars) EXPECT_TRUE(ToProto(s, b.add_scalars()).ok());
  e.set_mode(mode == ExecutionMode::kUnchecked ? v1::EXECUTION_MODE_UNCHECKED
                                               : v1::EXECUTION_MODE_CHECKED);
  return command.SerializeAsString();
}

TEST(ExecuteEncodingTest, TheBytesAreProtobufsForTheSdksLaunches) {
  const Scalars one{ElemType::kF32, {1.0}, {}, {}};
  std::string got = "prefix";
  ASSERT_TRUE(AppendExecuteCommand(Builtin("fill", ElemType::kF32), CubeCount{}, {FakeBinding(7)},
                                   {4, 1, 1, 5, 6, 1, 1}, {one}, ExecutionMode::kChecked, &got)
                  .ok());
  EXPECT_EQ(got,
            "prefix" + Reference(Builtin("fill", ElemType::kF32), CubeCount{}, {FakeBinding(7)},
                                 {4, 1, 1, 5, 6, 1, 1}, {one}, ExecutionMode::kChecked))
      << "appended after what the buffer held";
}

TEST(ExecuteEncodingTest, RandomLaunchesEncodeAsProtobufSerializesThem) {
  std::mt19937_64 random(20261207);
  auto any = [&](uint64_t bound) { return bound == 0 ? random() : random() % bound; };
  const ElemType types[] = {ElemType::kF32, ElemType::kF64, ElemType::kI32,  ElemType::kU32,
                            ElemType::kI64, ElemType::kF16, ElemType::kBF16, ElemType::kI8,
                            ElemType::kU8,  ElemType::kI16, ElemType::kU16,  ElemType::kBool};
  for (int trial = 0; trial < 2000; ++trial) {
    BuiltinKernel kernel;
    kernel.name = std::string(any(3) == 0 ? any(200) : any(12), 'a' + static_cast<char>(any(26)));
    kernel.dtype = types[any(12)];
    kernel.out_dtype = types[any(12)];
    kernel.axis = any(2) == 0 ? 0 : static_cast<uint32_t>(any(0));
    kernel.index_dtype = types[any(12)];
    kernel.allow_tf32 = any(2) == 0;
    const CubeCount count{static_cast<uint32_t>(any(3) == 0 ? any(0) : any(3)),
                          static_cast<uint32_t>(any(3)), static_cast<uint32_t>(any(70000))};
    std::vector<Binding> buffers;
    for (uint64_t i = any(6); i > 0; --i) {
      buffers.push_back(FakeBinding(any(2) == 0 ? any(0) | 1 : 1 + any(300), any(2) * any(0),
                                    any(2) * any(1000)));
    }
    std::vector<uint32_t> metadata;
    for (uint64_t i = any(3) == 0 ? any(300) : any(20); i > 0; --i) {
      metadata.push_back(static_cast<uint32_t>(any(2) == 0 ? any(0) : any(200)));
    }
    std::vector<Scalars> scalars;
    for (uint64_t g = any(4); g > 0; --g) {
      Scalars s;
      s.elem = types[any(12)];
      const bool is_float = IsFloat(s.elem);
      const bool is_uint = !is_float && !IsSigned(s.elem);
      for (uint64_t i = any(5); i > 0; --i) {
        if (is_float) {
          s.floats.push_back(static_cast<double>(static_cast<int64_t>(any(0))) / 7.0);
        } else if (is_uint) {
          s.uints.push_back(any(2) == 0 ? any(0) : any(3));
        } else {
          s.ints.push_back(static_cast<int64_t>(any(0)) >> any(64));
        }
      }
      scalars.push_back(s);
    }
    const ExecutionMode mode = any(2) == 0 ? ExecutionMode::kChecked : ExecutionMode::kUnchecked;
    std::string got;
    ASSERT_TRUE(AppendExecuteCommand(kernel, count, buffers, metadata, scalars, mode, &got).ok());
    ASSERT_EQ(got, Reference(kernel, count, buffers, metadata, scalars, mode)) << "trial " << trial;
  }
}

TEST(ExecuteEncodingTest, WhatToProtoRefusesIsRefusedAndNothingIsWritten) {
  std::string got = "kept";
  absl::Status refused = AppendExecuteCommand(Builtin("add", ElemType::kF32), CubeCount{},
                                              {Binding()}, {}, {}, ExecutionMode::kChecked, &got);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(refused.message(), "empty handle")) << refused;
  refused =
      AppendExecuteCommand(Builtin("fill", ElemType::kI32), CubeCount{}, {FakeBinding(3)}, {},
                           {Scalars{ElemType::kI32, {1.5}, {}, {}}}, ExecutionMode::kChecked, &got);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(refused.message(), "must use only the ints list")) << refused;
  EXPECT_EQ(got, "kept");
}

}  // namespace
}  // namespace cubed
