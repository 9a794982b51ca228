#include "client/cubectl/npy.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cubed::cubectl {
namespace {

using ::testing::HasSubstr;

// A .npy file with the given version and header text, padded the way NumPy pads it.
std::string MakeNpy(int major, std::string header, absl::string_view data) {
  const size_t len_bytes = major == 1 ? 2 : 4;
  const size_t unpadded = 8 + len_bytes + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::string out("\x93NUMPY", 6);
  out.push_back(static_cast<char>(major));
  out.push_back(0);
  for (size_t i = 0; i < len_bytes; ++i) out.push_back(static_cast<char>(header.size() >> (8 * i)));
  return out + header + std::string(data);
}

std::string Bytes(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 7 + 1);
  return s;
}

TEST(NpyTest, EncodeMatchesNumpyByteForByte) {
  // np.save(f, np.arange(6, dtype='<f4').reshape(2, 3)) writes exactly this.
  std::vector<float> values = {0, 1, 2, 3, 4, 5};
  std::string data(reinterpret_cast<const char*>(values.data()), values.size() * 4);
  auto file = EncodeNpy(ElemType::kF32, {2, 3}, data);
  ASSERT_TRUE(file.ok()) << file.status();
  std::string expected_header =
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" + std::string(58, ' ') + "\n";
  std::string expected = std::string("\x93NUMPY\x01\x00\x76\x00", 10) + expected_header + data;
  EXPECT_EQ(*file, expected);
  EXPECT_EQ(file->size() - data.size(), 128u);  // Data starts 64-byte aligned.
}

TEST(NpyTest, OneDimensionalShapeHasTrailingComma) {
  auto file = EncodeNpy(ElemType::kI64, {5}, Bytes(40));
  ASSERT_TRUE(file.ok());
  EXPECT_THAT(*file, HasSubstr("'shape': (5,), }"));
}

TEST(NpyTest, RoundTripsEveryTypeAndRank) {
  const std::vector<std::vector<uint64_t>> shapes = {
      {}, {7}, {2, 3}, {2, 1, 4}, {1, 2, 1, 2, 1, 2, 1, 2}};
  for (ElemType t : kAllElemTypes) {
    if (t == ElemType::kBF16) continue;  // Note [bf16 in .npy]: BF16IsRefusedBothWays.
    for (const auto& shape : shapes) {
      uint64_t n = 1;
      for (uint64_t d : shape) n *= d;
      const std::string data = Bytes(n * ElemSize(t));
      auto file = EncodeNpy(t, shape, data);
      ASSERT_TRUE(file.ok()) << file.status();
      auto array = ParseNpy(*file);
      ASSERT_TRUE(array.ok()) << array.status();
      EXPECT_EQ(array->dtype, t);
      EXPECT_EQ(array->shape, shape);
      EXPECT_EQ(array->data, data);
    }
  }
}

TEST(NpyTest, RoundTripsEmptyArray) {
  auto file = EncodeNpy(ElemType::kF64, {0, 3}, "");
  ASSERT_TRUE(file.ok());
  auto array = ParseNpy(*file);
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_EQ(array->shape, (std::vector<uint64_t>{0, 3}));
  EXPECT_TRUE(array->data.empty());
}

TEST(NpyTest, ParsesVersion2AndOtherSpellings) {
  // Double quotes, keys reordered, no trailing comma, Python 2 long suffix, version 2.0.
  auto array = ParseNpy(
      MakeNpy(2, "{\"shape\": (3L, 2), \"fortran_order\": False, \"descr\": \"<u4\"}", Bytes(24)));
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_EQ(array->dtype, ElemType::kU32);
  EXPECT_EQ(array->shape, (std::vector<uint64_t>{3, 2}));
  EXPECT_EQ(array->data, Bytes(24));
}

TEST(NpyTest, ParsesVersion3) {
  auto array =
      ParseNpy(MakeNpy(3, "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", Bytes(8)));
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_EQ(array->dtype, ElemType::kI32);
}

struct BadCase {
  std::string name;
  std::string file;
  std::string message;
};

TEST(NpyTest, RejectsBadFilesWithClearMessages) {
  const std::string ok_header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  const std::vector<BadCase> cases = {
      {"empty", "", "magic"},
      {"not npy", "hello world, not an array", "magic"},
      {"version 4", MakeNpy(1, ok_header, Bytes(8)).replace(6, 1, "\x04"), "version 4"},
      {"fortran",
       MakeNpy(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", Bytes(16)),
       "Fortran"},
      {"big endian",
       MakeNpy(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", Bytes(8)),
       "dtype '>f4' is not supported"},
      {"complex",
       MakeNpy(1, "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", Bytes(16)),
       "dtype '<c8'"},
      {"big-endian half",
       MakeNpy(1, "{'descr': '>f2', 'fortran_order': False, 'shape': (2,), }", Bytes(4)),
       "dtype '>f2'"},
      {"bfloat16 as numpy saves it",
       MakeNpy(1, "{'descr': '<V2', 'fortran_order': False, 'shape': (2,), }", Bytes(4)),
       "what numpy writes for ml_dtypes.bfloat16"},
      {"structured",
       MakeNpy(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", Bytes(8)),
       "quoted string"},
      {"short data", MakeNpy(1, ok_header, Bytes(7)), "7 bytes but shape (2) of <f4 needs 8"},
      {"long data", MakeNpy(1, ok_header, Bytes(9)), "9 bytes"},
      {"missing shape", MakeNpy(1, "{'descr': '<f4', 'fortran_order': False}", Bytes(4)),
       "missing 'shape'"},
      {"negative dim", MakeNpy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", ""),
       "non-negative integers"},
      {"unknown key",
       MakeNpy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), 'x': 1}", Bytes(4)),
       "unexpected key 'x'"},
      {"truncated header", MakeNpy(1, ok_header, "").substr(0, 30), "file ends after"},
      {"truncated length", std::string("\x93NUMPY\x01\x00\x10", 9), "header length"},
      {"overflowing shape",
       MakeNpy(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }",
               ""),
       "overflows"},
  };
  for (const auto& c : cases) {
    auto array = ParseNpy(c.file);
    ASSERT_FALSE(array.ok()) << c.name;
    EXPECT_EQ(array.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(array.status().message(), HasSubstr(c.message)) << c.name;
  }
}

TEST(NpyTest, SmallTypesUseNumpysDescrs) {
  // What numpy.save writes for float16, int8, uint8, int16, uint16 and bool_.
  const std::vector<std::pair<ElemType, std::string>> want = {
      {ElemType::kF16, "<f2"}, {ElemType::kI8, "|i1"},  {ElemType::kU8, "|u1"},
      {ElemType::kI16, "<i2"}, {ElemType::kU16, "<u2"}, {ElemType::kBool, "|b1"}};
  for (const auto& [t, descr] : want) {
    auto file = EncodeNpy(t, {2}, Bytes(2 * ElemSize(t)));
    ASSERT_TRUE(file.ok()) << file.status();
    EXPECT_THAT(*file, HasSubstr("'descr': '" + descr + "'"));
  }
}

TEST(NpyTest, BF16IsRefusedBothWays) {
  auto file = EncodeNpy(ElemType::kBF16, {2}, Bytes(4));
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(file.status().message(), HasSubstr(".npy has no bf16 dtype"));
}

TEST(NpyTest, EncodeRejectsWrongDataSize) {
  auto file = EncodeNpy(ElemType::kF32, {2, 3}, Bytes(20));
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(file.status().message(), HasSubstr("20 bytes but shape (2, 3) of f32 needs 24"));
}

}  // namespace
}  // namespace cubed::cubectl
