#include "kernels/cuda/disk_cache.h"

#include <stdlib.h>

#include <string>

#include "gtest/gtest.h"

namespace cubed::kernels {
namespace {

NvrtcOutput Sample() {
  NvrtcOutput out;
  out.image = std::string(
      "\x7f"
      "ELF\0binary\0",
      12);
  out.is_cubin = true;
  out.log = "warning: something";
  out.lowered = {{"f<float>", "_Z1fIfEvv"}, {"g", "g"}};
  return out;
}

void ExpectSame(const NvrtcOutput& a, const NvrtcOutput& b) {
  EXPECT_EQ(a.image, b.image);
  EXPECT_EQ(a.is_cubin, b.is_cubin);
  EXPECT_EQ(a.log, b.log);
  EXPECT_EQ(a.lowered, b.lowered);
}

TEST(DiskCacheTest, RecordRoundTrips) {
  const std::string bytes = EncodeCacheRecord("k1", Sample());
  std::optional<NvrtcOutput> back = DecodeCacheRecord("k1", bytes);
  ASSERT_TRUE(back.has_value());
  ExpectSame(*back, Sample());
}

TEST(DiskCacheTest, DamagedRecordsAreRejected) {
  const std::string bytes = EncodeCacheRecord("k1", Sample());
  EXPECT_FALSE(DecodeCacheRecord("k2", bytes).has_value());
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(DecodeCacheRecord("k1", bytes.substr(0, n)).has_value()) << n;
    std::string flipped = bytes;
    flipped[n] ^= 0x20;
    EXPECT_FALSE(DecodeCacheRecord("k1", flipped).has_value()) << n;
  }
  EXPECT_FALSE(DecodeCacheRecord("k1", bytes + "x").has_value());
}

TEST(DiskCacheTest, WritesAndReadsFiles) {
  std::string dir = testing::TempDir() + "/disk_cache_XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  DiskCache cache(dir + "/nested/dir/");
  EXPECT_FALSE(cache.Read("abc").has_value());
  ASSERT_TRUE(cache.Write("abc", Sample()).ok());
  std::optional<NvrtcOutput> back = cache.Read("abc");
  ASSERT_TRUE(back.has_value());
  ExpectSame(*back, Sample());
  EXPECT_EQ(cache.PathFor("abc"), dir + "/nested/dir/abc.nvrtc");
}

}  // namespace
}  // namespace cubed::kernels
