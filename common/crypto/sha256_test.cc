#include "common/crypto/sha256.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"

namespace cubed {
namespace {

std::string Hex(absl::string_view data) {
  absl::StatusOr<std::string> d = Sha256::Of(data);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? absl::BytesToHexString(*d) : "";
}

TEST(Sha256Test, KnownVectors) {  // FIPS 180-4 examples.
  EXPECT_EQ(Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, DigestIs32Bytes) {
  absl::StatusOr<std::string> d = Sha256::Of("x");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->size(), Sha256::kDigestBytes);
}

TEST(Sha256Test, SplitUpdatesMatchOneUpdate) {
  std::string data;
  for (int i = 0; i < 300; ++i) data.push_back(static_cast<char>(i * 7));
  const std::string whole = Hex(data);
  for (size_t cut = 0; cut <= data.size(); cut += 13) {
    Sha256 h;
    h.Update(absl::string_view(data).substr(0, cut));
    const std::vector<uint8_t> rest(data.begin() + cut, data.end());
    h.Update(absl::MakeConstSpan(rest));  // The byte-span overload: the same bytes.
    absl::StatusOr<std::string> d = h.Finish();
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(absl::BytesToHexString(*d), whole) << cut;
  }
}

TEST(Sha256Test, FinishAndResetStartANewString) {
  Sha256 h;
  h.Update("abc");
  ASSERT_EQ(absl::BytesToHexString(*h.Finish()), Hex("abc"));
  h.Update("abc");  // After Finish: "abc" alone again, not "abcabc".
  EXPECT_EQ(absl::BytesToHexString(*h.Finish()), Hex("abc"));
  h.Update("junk");
  h.Reset();
  h.Update("abc");
  EXPECT_EQ(absl::BytesToHexString(*h.Finish()), Hex("abc"));
  EXPECT_EQ(absl::BytesToHexString(*h.Finish()), Hex(""));
}

TEST(Sha256Test, FieldsAreUnambiguous) {
  Sha256 a, b, c;
  a.UpdateField("ab");
  a.UpdateField("c");
  b.UpdateField("a");
  b.UpdateField("bc");
  EXPECT_NE(*a.Finish(), *b.Finish());
  // A field is its length, 8 bytes little-endian, then its bytes.
  c.UpdateField("abc");
  EXPECT_EQ(*c.Finish(), *Sha256::Of(std::string("\x03\0\0\0\0\0\0\0abc", 11)));
}

}  // namespace
}  // namespace cubed
