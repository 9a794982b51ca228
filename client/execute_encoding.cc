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
// A varint field, left out when 0 (proto3, as protobuf serializes it).
size_t VarintField(uint64_t v) { return v == 0 ? 0 : 1 + VarintSize(v); }
// A length-delimited field whose body is `size` bytes.
size_t LengthField(size_t size) { return 1 + VarintSize(size) + size; }
uint64_t EnumValue(ElemType t) { return static_cast<uint64_t>(static_cast<int>(t)); }

// The sizes of a command's nested bodies, computed first (each length precedes its body).
struct Sizes {
  size_t builtin = 0;
  size_t kernel = 0;
  size_t static_count = 0;
  size_t count = 0;
  absl::InlinedVector<size_t, 4> buffers;
  size_t metadata = 0;  // The packed words, without tag and length.
  struct Group {
    size_t body = 0, ints = 0, uints = 0;
  };
  absl::InlinedVector<Group, 2> groups;
  size_t bindings = 0;
  size_t execute = 0;
};

size_t BindingBody(const Binding& b) {
  return VarintField(b.handle.id()) + VarintField(b.offset_start) + VarintField(b.offset_end);
}

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

absl::Status AppendExecuteCommand(const BuiltinKernel& kernel, CubeCount count,
                                  absl::Span<const Binding> buffers,
                                  absl::Span<const uint32_t> metadata,
                                  absl::Span<const Scalars> scalars, ExecutionMode mode,
                                  std::string* out) {
  for (const Binding& b : buffers) {
    if (!b.handle) return absl::InvalidArgumentError("binding has an empty handle");
  }
  for (const Scalars& s : scalars) RETURN_IF_ERROR(CheckScalarLists(s));
  const uint64_t wire_mode =
      mode == ExecutionMode::kUnchecked ? v1::EXECUTION_MODE_UNCHECKED : v1::EXECUTION_MODE_CHECKED;

  Sizes z;
  z.builtin = (kernel.name.empty() ? 0 : LengthField(kernel.name.size())) +
              VarintField(EnumValue(kernel.dtype)) + VarintField(EnumValue(kernel.out_dtype)) +
              VarintField(kernel.axis) + VarintField(EnumValue(kernel.index_dtype)) +
              (kernel.allow_tf32 ? 2 : 0);
  z.kernel = LengthField(z.builtin);
  z.static_count = VarintField(count.x) + VarintField(count.y) + VarintField(count.z);
  z.count = LengthField(z.static_count);
  for (const Binding& b : buffers) {
    z.buffers.push_back(BindingBody(b));
    z.bindings += LengthField(z.buffers.back());
  }
  for (const uint32_t word : metadata) z.metadata += VarintSize(word);
  if (!metadata.empty()) z.bindings += LengthField(z.metadata);
  for (const Scalars& s : scalars) {
    Sizes::Group g;
    for (const int64_t v : s.ints) g.ints += VarintSize(static_cast<uint64_t>(v));
    for (const uint64_t v : s.uints) g.uints += VarintSize(v);
    g.body =
        VarintField(EnumValue(s.elem)) + (s.floats.empty() ? 0 : LengthField(8 * s.floats.size())) +
        (s.ints.empty() ? 0 : LengthField(g.ints)) + (s.uints.empty() ? 0 : LengthField(g.uints));
    z.groups.push_back(g);
    z.bindings += LengthField(g.body);
  }
  z.execute = LengthField(z.kernel) + LengthField(z.count) + LengthField(z.bindings) +
              VarintField(wire_mode);

  const size_t start = out->size();
  out->resize(start + LengthField(z.execute));
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
  for (size_t i = 0; i < buffers.size(); ++i) {
    w.Length(v1::Bindings::kBuffersFieldNumber, z.buffers[i]);
    w.VarintField(v1::Binding::kHandleFieldNumber, buffers[i].handle.id());
    w.VarintField(v1::Binding::kOffsetStartFieldNumber, buffers[i].offset_start);
    w.VarintField(v1::Binding::kOffsetEndFieldNumber, buffers[i].offset_end);
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
