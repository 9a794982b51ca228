#include "server/service/stream/upload_chunk_wire.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace cubed {
namespace {

// Reads the protobuf wire format across the slices of one message.
class SliceCursor {
 public:
  explicit SliceCursor(const std::vector<grpc::Slice>& slices) : slices_(slices) {}

  bool done() {
    SkipEmpty();
    return i_ >= slices_.size();
  }
  // At most 10 bytes, as protobuf's own parser.
  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      SkipEmpty();
      if (i_ >= slices_.size()) return false;
      const uint8_t b = slices_[i_].begin()[pos_++];
      *v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  // The next `n` bytes as spans into the slices (appended to `out`); false when fewer are left.
  bool Take(uint64_t n, std::vector<absl::Span<const uint8_t>>* out) {
    while (n > 0) {
      SkipEmpty();
      if (i_ >= slices_.size()) return false;
      const uint64_t k = std::min<uint64_t>(n, slices_[i_].size() - pos_);
      if (out != nullptr) out->emplace_back(slices_[i_].begin() + pos_, k);
      pos_ += k;
      n -= k;
    }
    return true;
  }

 private:
  void SkipEmpty() {
    while (i_ < slices_.size() && pos_ >= slices_[i_].size()) {
      ++i_;
      pos_ = 0;
    }
  }
  const std::vector<grpc::Slice>& slices_;
  size_t i_ = 0;
  size_t pos_ = 0;
};

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("the upload chunk could not be parsed (", what,
                   "); each message of Upload is a cubed.v1.UploadChunk"));
}

}  // namespace

absl::Status ParseUploadChunk(const grpc::ByteBuffer& buffer, UploadPiece* piece) {
  *piece = UploadPiece();
  if (!buffer.Dump(&piece->slices).ok()) return Malformed("unreadable message");
  SliceCursor c(piece->slices);
  while (!c.done()) {
    uint64_t tag = 0, v = 0;
    if (!c.Varint(&tag)) return Malformed("truncated tag");
    const uint64_t field = tag >> 3;
    if (field == 0) return Malformed("field number 0");
    switch (tag & 7) {
      case 0:  // Varint.
        if (!c.Varint(&v)) return Malformed("truncated varint");
        if (field == 1) piece->session = v;
        if (field == 2) piece->seq = v;
        if (field == 3) piece->total = v;
        if (field == 4) piece->offset = v;
        if (field == 6) piece->lane = static_cast<uint32_t>(v);  // uint32 fields, as protobuf.
        if (field == 7) piece->lanes = static_cast<uint32_t>(v);
        break;
      case 1:  // Fixed 64.
        if (!c.Take(8, nullptr)) return Malformed("truncated fixed64");
        break;
      case 2:  // Length-delimited.
        if (!c.Varint(&v)) return Malformed("truncated length");
        if (field == 5) {
          piece->data.clear();
          piece->size = v;
          if (!c.Take(v, &piece->data)) return Malformed("data longer than the message");
        } else if (!c.Take(v, nullptr)) {
          return Malformed("a field longer than the message");
        }
        break;
      case 5:  // Fixed 32.
        if (!c.Take(4, nullptr)) return Malformed("truncated fixed32");
        break;
      default:
        return Malformed(absl::StrCat("wire type ", tag & 7, " of field ", field));
    }
  }
  return absl::OkStatus();
}

}  // namespace cubed
