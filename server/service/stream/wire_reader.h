#pragma once

// WireReader: a cursor over one protobuf message's bytes, for the stream's fast decoders (Note
// [Fast execute decode], execute_decoder.h). It reads what protobuf's own parser reads the way
// that parser does, and refuses the rare forms where a reader might differ from it (overlong
// varints and tags), so that its caller can leave those bytes to protobuf, which decides.
// protobuf's public reader, io::CodedInputStream, was tried first: its limit calls
// (BytesUntilLimit, PushLimit, PopLimit) are out of line, a quarter of the decoder's samples for
// a tiny execute (decode_bench, 2026-12-07); its parser's fast internals are not public API.

#include <cstdint>
#include <cstring>

#include "absl/strings/string_view.h"

namespace cubed::wire {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLength = 2 };
constexpr uint32_t Tag(uint32_t field, WireType type) { return field << 3 | type; }

// What ReadShortTag returns for a tag the fast decoders do not read.
inline constexpr uint32_t kOtherTag = UINT32_MAX;

class WireReader {
 public:
  WireReader() = default;
  explicit WireReader(absl::string_view bytes)
      : at_(reinterpret_cast<const uint8_t*>(bytes.data())), end_(at_ + bytes.size()) {}

  // Whether every byte was read.
  bool done() const { return at_ == end_; }
  size_t left() const { return static_cast<size_t>(end_ - at_); }
  // Where the next read starts.
  const char* position() const { return reinterpret_cast<const char*>(at_); }

  // The next tag (the reader not done): kOtherTag for anything but a one-byte tag of a field
  // numbered 1 .. 15 (every field the fast decoders read is).
  uint32_t ReadShortTag() {
    const uint8_t byte = *at_;
    if (byte >= 0x80 || byte < 8) return kOtherTag;
    ++at_;
    return byte;
  }

  // A varint; false for truncated bytes, more than 10 bytes, or a 10th byte that carries bits
  // past the 64th.
  bool ReadVarint(uint64_t& value) {
    uint64_t result = 0;
    for (int shift = 0; shift < 70 && at_ != end_; shift += 7) {
      const uint8_t byte = *at_++;
      if (shift == 63 && byte > 1) return false;
      result |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if (byte < 0x80) {
        value = result;
        return true;
      }
    }
    return false;
  }

  // A length-delimited field's bytes, as a view; false where protobuf's parser fails: a length of
  // more than 5 bytes or of 2^31 and more, or longer than what is left.
  bool ReadBytes(absl::string_view& bytes) {
    const uint8_t* start = at_;
    uint64_t size = 0;
    if (!ReadVarint(size) || at_ - start > 5 || size >= (uint64_t{1} << 31) || size > left()) {
      return false;
    }
    bytes = absl::string_view(reinterpret_cast<const char*>(at_), size);
    at_ += size;
    return true;
  }

  // A length-delimited field as a reader of its own; false as ReadBytes.
  bool ReadNested(WireReader& body) {
    absl::string_view bytes;
    if (!ReadBytes(bytes)) return false;
    body = WireReader(bytes);
    return true;
  }

  // A little-endian 8-byte value.
  bool ReadFixed64(uint64_t& value) {
    if (left() < 8) return false;
    std::memcpy(&value, at_, 8);  // x86-64 and aarch64 are little-endian.
    at_ += 8;
    return true;
  }

 private:
  const uint8_t* at_ = nullptr;
  const uint8_t* end_ = nullptr;
};

}  // namespace cubed::wire
