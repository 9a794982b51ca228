#include "kernels/cuda/sha256.h"

#include <string>

#include "gtest/gtest.h"

namespace cubed::kernels {
namespace {

std::string Hex(absl::string_view data) {
  Sha256 h;
  h.Update(data);
  return h.HexDigest();
}

TEST(Sha256Test, KnownVectors) {
  EXPECT_EQ(Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, SplitUpdatesMatchOneUpdate) {
  std::string data;
  for (int i = 0; i < 300; ++i) data.push_back(static_cast<char>(i * 7));
  const std::string whole = Hex(data);
  for (size_t cut = 0; cut <= data.size(); cut += 13) {
    Sha256 h;
    h.Update(absl::string_view(data).substr(0, cut));
    h.Update(absl::string_view(data).substr(cut));
    EXPECT_EQ(h.HexDigest(), whole) << cut;
  }
}

TEST(Sha256Test, FieldsAreUnambiguous) {
  Sha256 a, b;
  a.UpdateField("ab");
  a.UpdateField("c");
  b.UpdateField("a");
  b.UpdateField("bc");
  EXPECT_NE(a.HexDigest(), b.HexDigest());
}

}  // namespace
}  // namespace cubed::kernels
