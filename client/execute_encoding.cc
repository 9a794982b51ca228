#include "client/execute_encoding.h"

#include <cstring>

#include "absl/container/inlined_vector.h"
#include "client/proto_conversion.h"
#include "common/status_macros.h"
#include "cubed/v1/session.pb.h"
#include "google/protobuf/io/coded_stream.h"

namespace cubed {
namespace {

using google::protobuf::io::CodedOutputStream;

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLength = 2 };
constexpr uint8_t Tag(int field, WireType type) {
  return static_cast<uint8_t>(static_cast<uint32_t>(field) << 3 | type);
}

size_t VarintSize(uint64_t v) { return CodedOutputStream::VarintSize64(v); }
// The bytes of a varint field, left out when 0 (proto3, as protobuf serializes it).
size_t VarintFieldSize(uint64_t v) { return v == 0 ? 0 : 1 + VarintSize(v); }
// The bytes of a length-delimited field whose body is `size` bytes.
size_t LengthFieldSize(size_t size) { return 1 + VarintSize(size) + size; }
uint64_t EnumValue(ElemType t) { return static_cast<uint64_t>(static_cast<int>(t)); }

// The sizes of a command's nested bodies, computed first (each length precedes its body).
struct Sizes {
  size_t builtin = 0;
  size_t kernel = 0;
  size_t static_count = 0;
  size_t count = 0;
  size_t metadata = 0;  // The packed words, without tag and length.
  struct Group {
    size_t body = 0, ints = 0, uints = 0;
  };
  absl::InlinedVector<Group, 2> groups;
  size_t bindings = 0;
  size_t execute = 0;
};

// Writes into a buffer sized beforehand.
struct Writer {
  uint8_t* at;
  void Byte(uint8_t b) { *at++ = b; }
  void Varint(uint64_t v) { at = CodedOutputStream::WriteVarint64ToArray(v, at); }
  void VarintField(int field, uint64_t v) {
    if (v == 0) return;
    Byte(Tag(field, kVarint));
    Varint(v);
  }
  void Length(int field, size_t size) {
    Byte(Tag(field, kLength));
    Varint(size);
  }
};

}  // namespace

size_t BufferEntrySize(uint64_t handle, uint64_t offset_start, uint64_t offset_end) {
  return 2 + VarintFieldSize(handle) + VarintFieldSize(offset_start) + VarintFieldSize(offset_end);
}

uint8_t* WriteBufferEntry(uint64_t handle, uint64_t offset_start, uint64_t offset_end,
                          uint8_t* at) {
  Writer w{at + 2};
  w.VarintField(v1::Binding::kHandleFieldNumber, handle);
  w.VarintField(v1::Binding::kOffsetStartFieldNumber, offset_start);
  w.VarintField(v1::Binding::kOffsetEndFieldNumber, offset_end);
  at[0] = Tag(v1::Bindings::kBuffersFieldNumber, kLength);
  at[1] = static_cast<uint8_t>(w.at - at - 2);  // At most 33: one byte.
  return w.at;
}

absl::Status AppendExecuteCommand(const BuiltinKernel& kernel, CubeCount count,
                                  absl::Span<const Binding> buffers,
                                  absl::Span<const uint32_t> metadata,
                                  absl::Span<const Scalars> scalars, ExecutionMode mode,
                                  std::string* out) {
  for (const Binding& b : buffers) RETURN_IF_ERROR(CheckBinding(b));
  for (const Scalars& s : scalars) RETURN_IF_ERROR(CheckScalarLists(s));
  const uint64_t wire_mode = static_cast<uint64_t>(ToWire(mode));

  Sizes z;
  z.builtin = (kernel.name.empty() ? 0 : LengthFieldSize(kernel.name.size())) +
              VarintFieldSize(EnumValue(kernel.dtype)) +
              VarintFieldSize(EnumValue(kernel.out_dtype)) + VarintFieldSize(kernel.axis) +
              VarintFieldSize(EnumValue(kernel.index_dtype)) + (kernel.allow_tf32 ? 2 : 0);
  z.kernel = LengthFieldSize(z.builtin);
  z.static_count = VarintFieldSize(count.x) + VarintFieldSize(count.y) + VarintFieldSize(count.z);
  z.count = LengthFieldSize(z.static_count);
  for (const Binding& b : buffers) {
    z.bindings += BufferEntrySize(b.handle.id(), b.offset_start, b.offset_end);
  }
  for (const uint32_t word : metadata) z.metadata += VarintSize(word);
  if (!metadata.empty()) z.bindings += LengthFieldSize(z.metadata);
  for (const Scalars& s : scalars) {
    Sizes::Group g;
    for (const int64_t v : s.ints) g.ints += VarintSize(static_cast<uint64_t>(v));
    for (const uint64_t v : s.uints) g.uints += VarintSize(v);
    g.body = VarintFieldSize(EnumValue(s.elem)) +
             (s.floats.empty() ? 0 : LengthFieldSize(8 * s.floats.size())) +
             (s.ints.empty() ? 0 : LengthFieldSize(g.ints)) +
             (s.uints.empty() ? 0 : LengthFieldSize(g.uints));
    z.groups.push_back(g);
    z.bindings += LengthFieldSize(g.body);
  }
  z.execute = LengthFieldSize(z.kernel) + LengthFieldSize(z.count) + LengthFieldSize(z.bindings) +
              VarintFieldSize(wire_mode);

  const size_t start = out->size();
  out->resize(start + LengthFieldSize(z.execute));
  Writer w{reinterpret_cast<uint8_t*>(&(*out)[start])};
  w.Length(v1::Command::kExecuteFieldNumber, z.execute);
  w.Length(v1::Command::Execute::kKernelFieldNumber, z.kernel);
  w.Length(v1::Kernel::kBuiltinFieldNumber, z.builtin);
  if (!kernel.name.empty()) {
    w.Length(v1::BuiltinKernel::kNameFieldNumber, kernel.name.size());
    std::memcpy(w.at, kernel.name.data(), kernel.name.size());
    w.at += kernel.name.size();
  }
  w.VarintField(v1::BuiltinKernel::kDtypeFieldNumber, EnumValue(kernel.dtype));
  w.VarintField(v1::BuiltinKernel::kOutDtypeFieldNumber, EnumValue(kernel.out_dtype));
  w.VarintField(v1::BuiltinKernel::kAxisFieldNumber, kernel.axis);
  w.VarintField(v1::BuiltinKernel::kIndexDtypeFieldNumber, EnumValue(kernel.index_dtype));
  w.VarintField(v1::BuiltinKernel::kAllowTf32FieldNumber, kernel.allow_tf32 ? 1 : 0);
  w.Length(v1::Command::Execute::kCountFieldNumber, z.count);
  w.Length(v1::CubeCount::kStaticCountFieldNumber, z.static_count);
  w.VarintField(v1::CubeCount::Static::kXFieldNumber, count.x);
  w.VarintField(v1::CubeCount::Static::kYFieldNumber, count.y);
  w.VarintField(v1::CubeCount::Static::kZFieldNumber, count.z);
  w.Length(v1::Command::Execute::kBindingsFieldNumber, z.bindings);
  for (const Binding& b : buffers) {
    w.at = WriteBufferEntry(b.handle.id(), b.offset_start, b.offset_end, w.at);
  }
  if (!metadata.empty()) {
    w.Length(v1::Bindings::kMetadataFieldNumber, z.metadata);
    for (const uint32_t word : metadata) w.Varint(word);
  }
  for (size_t i = 0; i < scalars.size(); ++i) {
    const Scalars& s = scalars[i];
    w.Length(v1::Bindings::kScalarsFieldNumber, z.groups[i].body);
    w.VarintField(v1::ScalarGroup::kElemFieldNumber, EnumValue(s.elem));
    if (!s.floats.empty()) {
      w.Length(v1::ScalarGroup::kFloatsFieldNumber, 8 * s.floats.size());
      for (const double f : s.floats) {
        uint64_t bits;
        std::memcpy(&bits, &f, sizeof(bits));
        w.at = CodedOutputStream::WriteLittleEndian64ToArray(bits, w.at);
      }
    }
    if (!s.ints.empty()) {
      w.Length(v1::ScalarGroup::kIntsFieldNumber, z.groups[i].ints);
      for (const int64_t v : s.ints) w.Varint(static_cast<uint64_t>(v));
    }
    if (!s.uints.empty()) {
      w.Length(v1::ScalarGroup::kUintsFieldNumber, z.groups[i].uints);
      for (const uint64_t v : s.uints) w.Varint(v);
    }
  }
  w.VarintField(v1::Command::Execute::kModeFieldNumber, wire_mode);
  return absl::OkStatus();
}

}  // namespace cubed
