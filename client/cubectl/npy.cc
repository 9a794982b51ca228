#include "client/cubectl/npy.h"

#include <cstring>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/checked_math.h"
#include "common/status_macros.h"

namespace cubed::cubectl {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
constexpr size_t kMaxRank = 32;  // NumPy's own limit.

absl::Status HeaderError(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(".npy header: ", what));
}

// The three header values we need, parsed from the Python dict literal in the header.
struct Header {
  std::optional<std::string> descr;
  std::optional<bool> fortran_order;
  std::optional<std::vector<uint64_t>> shape;
};

// Recursive-descent reader for exactly the literal grammar .npy headers use: a dict of string
// keys to strings, True/False, or tuples of non-negative integers.
class HeaderParser {
 public:
  explicit HeaderParser(absl::string_view text) : rest_(text) {}

  absl::StatusOr<Header> Parse() {
    Header h;
    RETURN_IF_ERROR(Expect('{'));
    while (true) {
      SkipSpace();
      if (Consume('}')) break;
      ASSIGN_OR_RETURN(std::string key, ParseString());
      RETURN_IF_ERROR(Expect(':'));
      SkipSpace();
      if (key == "descr") {
        ASSIGN_OR_RETURN(h.descr, ParseString());
      } else if (key == "fortran_order") {
        ASSIGN_OR_RETURN(h.fortran_order, ParseBool());
      } else if (key == "shape") {
        ASSIGN_OR_RETURN(h.shape, ParseTuple());
      } else {
        return HeaderError(absl::StrCat("unexpected key '", key, "'"));
      }
      SkipSpace();
      if (Consume(',')) continue;
      RETURN_IF_ERROR(Expect('}'));
      break;
    }
    SkipSpace();
    if (!rest_.empty()) return HeaderError("trailing characters after the dict");
    if (!h.descr) return HeaderError("missing 'descr'");
    if (!h.fortran_order) return HeaderError("missing 'fortran_order'");
    if (!h.shape) return HeaderError("missing 'shape'");
    return h;
  }

 private:
  void SkipSpace() {
    while (!rest_.empty() && absl::ascii_isspace(static_cast<unsigned char>(rest_[0]))) {
      rest_.remove_prefix(1);
    }
  }
  bool Consume(char c) {
    if (rest_.empty() || rest_[0] != c) return false;
    rest_.remove_prefix(1);
    return true;
  }
  absl::Status Expect(char c) {
    SkipSpace();
    if (Consume(c)) return absl::OkStatus();
    return HeaderError(
        absl::StrCat("expected '", std::string(1, c), "' at \"", rest_.substr(0, 20), "\""));
  }
  absl::StatusOr<std::string> ParseString() {
    SkipSpace();
    if (rest_.empty() || (rest_[0] != '\'' && rest_[0] != '"')) {
      return HeaderError(absl::StrCat("expected a quoted string at \"", rest_.substr(0, 20), "\""));
    }
    const char quote = rest_[0];
    size_t end = rest_.find(quote, 1);
    if (end == absl::string_view::npos) return HeaderError("unterminated string");
    std::string s(rest_.substr(1, end - 1));
    rest_.remove_prefix(end + 1);
    return s;
  }
  absl::StatusOr<bool> ParseBool() {
    if (absl::ConsumePrefix(&rest_, "True")) return true;
    if (absl::ConsumePrefix(&rest_, "False")) return false;
    return HeaderError("'fortran_order' must be True or False");
  }
  absl::StatusOr<std::vector<uint64_t>> ParseTuple() {
    RETURN_IF_ERROR(Expect('('));
    std::vector<uint64_t> dims;
    while (true) {
      SkipSpace();
      if (Consume(')')) return dims;
      size_t n = 0;
      while (n < rest_.size() && absl::ascii_isdigit(static_cast<unsigned char>(rest_[n]))) ++n;
      uint64_t v;
      if (n == 0 || !absl::SimpleAtoi(rest_.substr(0, n), &v)) {
        return HeaderError(absl::StrCat("'shape' must be a tuple of non-negative integers, got \"",
                                        rest_.substr(0, 20), "\""));
      }
      rest_.remove_prefix(n);
      Consume('L');  // Python 2 long literal.
      dims.push_back(v);
      if (dims.size() > kMaxRank) return HeaderError("'shape' has too many dimensions");
      SkipSpace();
      if (Consume(',')) continue;
      RETURN_IF_ERROR(Expect(')'));
      return dims;
    }
  }

  absl::string_view rest_;
};

absl::StatusOr<ElemType> ElemTypeFromDescr(absl::string_view descr) {
  for (ElemType t : kAllElemTypes) {
    if (!NpyDescr(t).empty() && descr == NpyDescr(t)) return t;
  }
  if (descr == "<V2" || descr == "|V2") {
    return absl::InvalidArgumentError(
        ".npy dtype '<V2' (raw 2-byte records, what numpy writes for ml_dtypes.bfloat16) is not "
        "supported: .npy has no bf16 type; save the array as float32 (astype) and cast on the "
        "daemon");
  }
  return absl::InvalidArgumentError(absl::StrCat(
      ".npy dtype '", descr,
      "' is not supported (expected little-endian <f4, <f8, <f2, <i4, <u4, <i8, |i1, |u1, <i2, "
      "<u2 or |b1; convert with numpy's astype)"));
}

absl::StatusOr<uint64_t> DataBytes(ElemType dtype, absl::Span<const uint64_t> shape) {
  std::optional<uint64_t> elems = CheckedProduct(shape);
  std::optional<uint64_t> bytes = elems ? CheckedMul(*elems, ElemSize(dtype)) : std::nullopt;
  if (!bytes) return absl::InvalidArgumentError("shape is too large: its byte size overflows");
  return *bytes;
}

uint32_t ReadLittleEndian(absl::string_view bytes) {
  uint32_t v = 0;
  for (size_t i = bytes.size(); i-- > 0;) v = (v << 8) | static_cast<uint8_t>(bytes[i]);
  return v;
}

}  // namespace

absl::string_view NpyDescr(ElemType t) {
  switch (t) {
    case ElemType::kF32:
      return "<f4";
    case ElemType::kF64:
      return "<f8";
    case ElemType::kI32:
      return "<i4";
    case ElemType::kU32:
      return "<u4";
    case ElemType::kI64:
      return "<i8";
    case ElemType::kF16:
      return "<f2";
    case ElemType::kBF16:
      return "";  // None: see NpyDescr's contract.
    case ElemType::kI8:
      return "|i1";
    case ElemType::kU8:
      return "|u1";
    case ElemType::kI16:
      return "<i2";
    case ElemType::kU16:
      return "<u2";
    case ElemType::kBool:
      return "|b1";
  }
  return "";
}

absl::StatusOr<NpyArray> ParseNpy(absl::string_view file) {
  if (file.size() < kMagicLen + 2 || file.substr(0, kMagicLen) != absl::string_view(kMagic)) {
    return absl::InvalidArgumentError("not a .npy file (missing the \\x93NUMPY magic)");
  }
  const int major = static_cast<uint8_t>(file[kMagicLen]);
  const size_t len_bytes = major == 1 ? 2 : (major == 2 || major == 3) ? 4 : 0;
  if (len_bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(".npy format version ", major, " is not supported (expected 1, 2 or 3)"));
  }
  const size_t prefix = kMagicLen + 2 + len_bytes;
  if (file.size() < prefix) return HeaderError("file ends inside the header length");
  const uint64_t header_len = ReadLittleEndian(file.substr(kMagicLen + 2, len_bytes));
  if (file.size() - prefix < header_len) {
    return HeaderError(absl::StrCat("says it is ", header_len, " bytes but the file ends after ",
                                    file.size() - prefix));
  }
  ASSIGN_OR_RETURN(Header h, HeaderParser(file.substr(prefix, header_len)).Parse());
  if (*h.fortran_order) {
    return absl::InvalidArgumentError(
        ".npy file is in Fortran (column-major) order; only C order is supported (save it with "
        "numpy.ascontiguousarray)");
  }
  NpyArray array;
  ASSIGN_OR_RETURN(array.dtype, ElemTypeFromDescr(*h.descr));
  array.shape = std::move(*h.shape);
  ASSIGN_OR_RETURN(uint64_t want, DataBytes(array.dtype, array.shape));
  absl::string_view data = file.substr(prefix + header_len);
  if (data.size() != want) {
    return absl::InvalidArgumentError(
        absl::StrCat(".npy data is ", data.size(), " bytes but shape (",
                     absl::StrJoin(array.shape, ", "), ") of ", *h.descr, " needs ", want));
  }
  array.data = std::string(data);
  return array;
}

absl::StatusOr<std::string> EncodeNpy(ElemType dtype, absl::Span<const uint64_t> shape,
                                      absl::string_view data) {
  if (NpyDescr(dtype).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        ".npy has no ", ElemTypeName(dtype),
        " dtype (numpy would store ml_dtypes.bfloat16 as raw '<V2' records, which read back as "
        "bytes): cast the tensor to f32 first, or write it as raw bytes"));
  }
  ASSIGN_OR_RETURN(uint64_t want, DataBytes(dtype, shape));
  if (data.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat("data is ", data.size(), " bytes but shape (",
                                                   absl::StrJoin(shape, ", "), ") of ",
                                                   ElemTypeName(dtype), " needs ", want));
  }
  std::string dims = absl::StrJoin(shape, ", ");
  if (shape.size() == 1) dims += ",";
  std::string header = absl::StrCat("{'descr': '", NpyDescr(dtype),
                                    "', 'fortran_order': False, 'shape': (", dims, "), }");
  // The header, padded with spaces and ended by '\n', makes the data start 64-byte aligned.
  // Version 1.0 stores its length in 2 bytes; longer headers need version 2.0 (4 bytes).
  auto padded_len = [&](size_t n) {
    const size_t unpadded = kMagicLen + 2 + n + header.size() + 1;
    return header.size() + 1 + (64 - unpadded % 64) % 64;
  };
  const bool v2 = padded_len(2) > 65535;
  const size_t len_bytes = v2 ? 4 : 2;
  header.resize(padded_len(len_bytes) - 1, ' ');
  header.push_back('\n');

  std::string out(kMagic, kMagicLen);
  out.push_back(v2 ? 2 : 1);
  out.push_back(0);
  const uint32_t len = static_cast<uint32_t>(header.size());
  for (size_t i = 0; i < len_bytes; ++i) out.push_back(static_cast<char>(len >> (8 * i)));
  out += header;
  out.append(data.data(), data.size());
  return out;
}

}  // namespace cubed::cubectl
