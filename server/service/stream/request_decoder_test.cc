#include "server/service/stream/request_decoder.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/service/stream/stream_command_conversion.h"

namespace cubed {
namespace {

// An execute as the SDKs write it (client/proto_conversion.cc): a builtin with its dtype, a
// static count, buffers, metadata and one scalar group.
v1::Command FillExecute(uint64_t seq, uint64_t handle) {
  v1::Command c;
  c.set_seq(seq);
  v1::Command::Execute& e = *c.mutable_execute();
  e.mutable_kernel()->mutable_builtin()->set_name("fill");
  e.mutable_kernel()->mutable_builtin()->set_dtype(v1::ELEM_TYPE_F32);
  e.mutable_count()->mutable_static_count()->set_x(1);
  e.mutable_count()->mutable_static_count()->set_y(1);
  e.mutable_count()->mutable_static_count()->set_z(1);
  e.mutable_bindings()->add_buffers()->set_handle(handle);
  for (uint32_t word : {4u, 1u, 1u, 5u, 6u, 1u, 1u}) e.mutable_bindings()->add_metadata(word);
  v1::ScalarGroup& g = *e.mutable_bindings()->add_scalars();
  g.set_elem(v1::ELEM_TYPE_F32);
  g.add_floats(2.5);
  return c;
}

std::string RequestOf(const std::vector<v1::Command>& commands, bool open = false) {
  v1::SessionRequest r;
  if (open) r.mutable_open()->set_device(0);
  for (const v1::Command& c : commands) *r.add_commands() = c;
  return r.SerializeAsString();
}

// What protobuf's parse and ToStreamCommand make of `bytes`, the decoder's reference.
std::vector<StreamCommand> Reference(const std::string& bytes, const RequestLimits& limits) {
  v1::SessionRequest r;
  EXPECT_TRUE(r.ParseFromString(bytes));
  std::vector<StreamCommand> out(static_cast<size_t>(r.commands_size()));
  for (int i = 0; i < r.commands_size(); ++i) {
    ToStreamCommand(*r.mutable_commands(i), limits, out[static_cast<size_t>(i)]);
  }
  return out;
}

void ExpectSame(const StreamCommand& got, const StreamCommand& want) {
  EXPECT_EQ(got.kind, want.kind);
  EXPECT_EQ(got.seq, want.seq);
  EXPECT_EQ(got.invalid, want.invalid);
  EXPECT_EQ(got.outputs, want.outputs);
  // What an invalid command holds beyond these is never used (it fails where it would run).
  if (want.kind != StreamCommand::Kind::kExecute || !want.invalid.ok()) return;
  const ExecuteCommand& a = got.execute;
  const ExecuteCommand& b = want.execute;
  EXPECT_EQ(a.kernel.is_builtin, b.kernel.is_builtin);
  EXPECT_EQ(a.kernel.builtin.name, b.kernel.builtin.name);
  EXPECT_EQ(a.kernel.builtin.dtype, b.kernel.builtin.dtype);
  EXPECT_EQ(a.kernel.builtin.metadata, b.kernel.builtin.metadata);
  ASSERT_EQ(a.kernel.builtin.scalars.size(), b.kernel.builtin.scalars.size());
  for (size_t i = 0; i < a.kernel.builtin.scalars.size(); ++i) {
    EXPECT_EQ(a.kernel.builtin.scalars[i].bytes, b.kernel.builtin.scalars[i].bytes);
  }
  EXPECT_EQ(a.dynamic_count, b.dynamic_count);
  EXPECT_EQ(std::vector<uint32_t>(a.count, a.count + 3),
            std::vector<uint32_t>(b.count, b.count + 3));
  ASSERT_EQ(a.buffers.size(), b.buffers.size());
  for (size_t i = 0; i < a.buffers.size(); ++i) EXPECT_EQ(a.buffers[i].handle, b.buffers[i].handle);
  EXPECT_EQ(a.unchecked, b.unchecked);
}

// Decodes `bytes` and checks it against the reference; returns how many commands took the fast
// path.
uint64_t DecodeAndCompare(const std::string& bytes, const RequestLimits& limits = {}) {
  RequestDecoder decoder(limits, 4096);
  EXPECT_TRUE(decoder.Merge(bytes).ok());
  const std::vector<StreamCommand> want = Reference(bytes, limits);
  EXPECT_EQ(decoder.commands().size(), want.size());
  for (size_t i = 0; i < want.size() && i < decoder.commands().size(); ++i) {
    SCOPED_TRACE(i);
    ExpectSame(decoder.commands()[i], want[i]);
  }
  return decoder.fast_decoded();
}

TEST(RequestDecoderTest, TheSdksExecutesAreDecodedStraightFromTheirBytes) {
  std::vector<v1::Command> commands;
  for (uint64_t i = 0; i < 100; ++i) commands.push_back(FillExecute(10 + i, (1ull << 63) + i));
  const std::string bytes = RequestOf(commands, /*open=*/true);
  EXPECT_EQ(DecodeAndCompare(bytes), 100u) << "every execute on the fast path";

  RequestDecoder decoder(RequestLimits{}, 4096);
  ASSERT_TRUE(decoder.Merge(bytes).ok());
  ASSERT_TRUE(decoder.has_open());
  const StreamCommand& c = decoder.commands()[7];
  EXPECT_EQ(c.seq, 17u);
  EXPECT_TRUE(c.invalid.ok()) << c.invalid;
  EXPECT_EQ(c.execute.kernel.builtin.name, "fill");
  EXPECT_EQ(c.execute.buffers.at(0).handle, HandleId((1ull << 63) + 7));
  const float two_and_a_half = 2.5f;
  const auto& scalar = c.execute.kernel.builtin.scalars.at(0).bytes;
  ASSERT_EQ(scalar.size(), sizeof(float));
  EXPECT_EQ(std::memcmp(scalar.data(), &two_and_a_half, sizeof(float)), 0);
}

TEST(RequestDecoderTest, WithTheFastPathOffEveryCommandGoesThroughProtobuf) {
  std::vector<v1::Command> commands;
  for (uint64_t i = 0; i < 10; ++i) commands.push_back(FillExecute(i, 5));
  const std::string bytes = RequestOf(commands, /*open=*/true);
  RequestDecoder decoder(RequestLimits{}, 4096, /*fast=*/false);
  ASSERT_TRUE(decoder.Merge(bytes).ok());
  EXPECT_EQ(decoder.fast_decoded(), 0u);
  const std::vector<StreamCommand> want = Reference(bytes, RequestLimits{});
  ASSERT_EQ(decoder.commands().size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ExpectSame(decoder.commands()[i], want[i]);
}

TEST(RequestDecoderTest, EveryOtherFormGoesThroughProtobufWithTheSameResult) {
  std::vector<v1::Command> declined;
  {
    v1::Command c = FillExecute(1, 5);  // A client kernel.
    c.mutable_execute()->mutable_kernel()->mutable_cuda_source()->set_source("x");
    c.mutable_execute()->mutable_kernel()->mutable_cuda_source()->set_entry_point("k");
    declined.push_back(c);
  }
  {
    v1::Command c = FillExecute(2, 5);  // A dynamic count.
    c.mutable_execute()->mutable_count()->mutable_dynamic()->set_handle(9);
    declined.push_back(c);
  }
  {
    v1::Command c = FillExecute(3, 5);  // A name that is not ASCII.
    c.mutable_execute()->mutable_kernel()->mutable_builtin()->set_name("f\xc3\xbcll");
    declined.push_back(c);
  }
  {
    v1::Command c = FillExecute(4, 5);  // A negative enum.
    c.mutable_execute()->set_mode(static_cast<v1::ExecutionMode>(-1));
    declined.push_back(c);
  }
  {
    v1::Command c;  // Not an execute.
    c.set_seq(5);
    c.mutable_release()->add_ids(3);
    declined.push_back(c);
  }
  EXPECT_EQ(DecodeAndCompare(RequestOf(declined)), 0u);

  // Forms only hand-written bytes have: a singular field twice (protobuf merges), metadata not
  // packed, a field the schema does not have.
  const std::string one = FillExecute(6, 5).SerializeAsString();
  std::string twice;  // Command.execute twice: the two merge.
  {
    v1::Command extra;
    extra.mutable_execute()->mutable_bindings()->add_buffers()->set_handle(8);
    twice = one + extra.SerializeAsString();
  }
  std::string unpacked;  // Execute { bindings { metadata: 7 (a varint, not packed) } }.
  {
    v1::Command c = FillExecute(7, 5);
    c.mutable_execute()->mutable_bindings()->clear_metadata();
    const std::string bindings_field("\x1a\x02\x10\x07", 4);  // bindings { 2: varint 7 }
    std::string execute = c.execute().SerializeAsString() + bindings_field;
    unpacked = std::string("\x08\x07", 2) + "\x32" + static_cast<char>(execute.size()) + execute;
  }
  std::string unknown = one + std::string("\x48\x01", 2);  // Command field 9: not in the schema.
  for (const std::string& command : {twice, unpacked, unknown}) {
    const std::string request =
        "\x12" + std::string(1, static_cast<char>(command.size())) + command;
    EXPECT_EQ(DecodeAndCompare(request), 0u);
  }
}

TEST(RequestDecoderTest, DeclinedAndTakenCommandsInterleavedKeepTheirOrder) {
  // Runs of declined commands parse as one piece each, between the executes taken.
  std::vector<v1::Command> mixed;
  for (int pattern : {0, 1, 0, 0, 1, 1, 1, 0, 1}) {
    v1::Command c = FillExecute(mixed.size() + 1, 5);
    if (pattern == 1) {
      c.clear_execute();
      c.mutable_release()->add_ids(mixed.size());
    }
    mixed.push_back(c);
  }
  EXPECT_EQ(DecodeAndCompare(RequestOf(mixed, /*open=*/true)), 4u);
  mixed.erase(mixed.begin());  // Starting with a declined run.
  EXPECT_EQ(DecodeAndCompare(RequestOf(mixed)), 3u);
}

TEST(RequestDecoderTest, ConversionErrorsAreThoseOfTheProtobufPath) {
  RequestLimits limits;
  limits.max_buffers = 2;
  std::vector<v1::Command> bad;
  v1::Command c = FillExecute(1, 5);
  c.mutable_execute()->mutable_kernel()->mutable_builtin()->set_dtype(
      static_cast<v1::ElemType>(99));
  bad.push_back(c);
  c = FillExecute(2, 5);
  for (int i = 0; i < 3; ++i) c.mutable_execute()->mutable_bindings()->add_buffers()->set_handle(6);
  bad.push_back(c);
  c = FillExecute(3, 5);
  c.mutable_execute()->mutable_bindings()->mutable_scalars(0)->set_elem(v1::ELEM_TYPE_U8);
  c.mutable_execute()->mutable_bindings()->mutable_scalars(0)->clear_floats();
  c.mutable_execute()->mutable_bindings()->mutable_scalars(0)->add_uints(256);
  bad.push_back(c);
  c = FillExecute(4, 5);
  c.mutable_execute()->mutable_kernel()->mutable_builtin()->set_name("cast");
  bad.push_back(c);
  c = FillExecute(5, 5);
  c.mutable_execute()->set_mode(static_cast<v1::ExecutionMode>(7));
  bad.push_back(c);
  const std::string bytes = RequestOf(bad);
  EXPECT_EQ(DecodeAndCompare(bytes, limits), 5u);

  RequestDecoder decoder(limits, 4096);
  ASSERT_TRUE(decoder.Merge(bytes).ok());
  EXPECT_TRUE(absl::StrContains(decoder.commands()[1].invalid.message(), "bindings.buffers: 4"))
      << decoder.commands()[1].invalid;
  EXPECT_TRUE(absl::StrContains(decoder.commands()[2].invalid.message(), "does not fit in u8"))
      << decoder.commands()[2].invalid;
  EXPECT_EQ(decoder.commands()[1].outputs.at(0), HandleId(6)) << "the last buffer is poisoned";
}

TEST(RequestDecoderTest, BytesThatDoNotParseAreRefusedAndLeaveNothingBehind) {
  RequestDecoder decoder(RequestLimits{}, 4096);
  ASSERT_TRUE(decoder.Merge(RequestOf({FillExecute(1, 5)}, /*open=*/true)).ok());
  const std::string good = RequestOf({FillExecute(2, 5), FillExecute(3, 5)});
  for (const std::string& broken : {good.substr(0, good.size() - 3), good + "\x12\x05"}) {
    const absl::Status refused = decoder.Merge(broken);
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(
        refused.message(), absl::StrCat("a request of ", broken.size(), " bytes does not parse")))
        << refused;
    EXPECT_EQ(decoder.commands().size(), 1u) << "the refused request's commands are gone";
    EXPECT_TRUE(decoder.has_open());
  }
  ASSERT_TRUE(decoder.Merge(good).ok());  // Merged after the first: appended.
  EXPECT_EQ(decoder.commands().size(), 3u);
  EXPECT_EQ(decoder.commands()[2].seq, 3u);
  decoder.Reset();
  EXPECT_TRUE(decoder.commands().empty());
  EXPECT_FALSE(decoder.has_open());
}

TEST(RequestDecoderTest, ARequestOverTheCommandBoundIsReportedWithItsCount) {
  RequestDecoder decoder(RequestLimits{}, 3);
  std::vector<v1::Command> five;
  for (uint64_t i = 0; i < 5; ++i) five.push_back(FillExecute(i, 5));
  ASSERT_TRUE(decoder.Merge(RequestOf({five[0], five[1]})).ok());
  ASSERT_TRUE(decoder.Merge(RequestOf({five[2], five[3]})).ok());
  EXPECT_EQ(decoder.too_many(), 0u) << "two requests within the bound, merged past it: fine";
  EXPECT_EQ(decoder.commands().size(), 4u);
  ASSERT_TRUE(decoder.Merge(RequestOf(five)).ok());
  EXPECT_EQ(decoder.too_many(), 5u) << "bounded per request, not per merged read";
  EXPECT_EQ(decoder.commands().size(), 7u) << "4 + the first 3 of the five";
}

TEST(RequestDecoderTest, ATopLevelFormOutsideTheFastPathIsParsedWhole) {
  // `open` twice merges field by field; an unknown top-level field is skipped.
  v1::SessionRequest first;
  first.mutable_open()->set_device(2);
  v1::SessionRequest second;
  second.mutable_open()->set_lease_ms(77);
  *second.add_commands() = FillExecute(1, 5);
  const std::string bytes =
      first.SerializeAsString() + second.SerializeAsString() + std::string("\x48\x01", 2);
  RequestDecoder decoder(RequestLimits{}, 4096);
  ASSERT_TRUE(decoder.Merge(bytes).ok());
  ASSERT_TRUE(decoder.has_open());
  EXPECT_EQ(decoder.open().device(), 2u);
  EXPECT_EQ(decoder.open().lease_ms(), 77u);
  ASSERT_EQ(decoder.commands().size(), 1u);
  EXPECT_EQ(decoder.commands()[0].seq, 1u);
  EXPECT_EQ(decoder.fast_decoded(), 0u);
}

}  // namespace
}  // namespace cubed
