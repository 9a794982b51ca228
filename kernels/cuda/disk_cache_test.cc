#include "kernels/cuda/disk_cache.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "gmock/gmock.h"
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

// Note [Cache files are untrusted]: what appears at a record's path is a miss, without blocking,
// and the next Write replaces it.
TEST(DiskCacheTest, AFifoADirectoryOrAHugeFileAtTheRecordPathIsAMiss) {
  std::string dir = testing::TempDir() + "/disk_cache_XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  DiskCache cache(dir, /*max_record_bytes=*/4096);
  ASSERT_EQ(mkfifo(cache.PathFor("fifo").c_str(), 0644), 0);
  EXPECT_FALSE(cache.Read("fifo").has_value());  // Returns: the open does not wait for a writer.
  ASSERT_TRUE(cache.Write("fifo", Sample()).ok());
  ASSERT_TRUE(cache.Read("fifo").has_value());

  ASSERT_EQ(mkdir(cache.PathFor("dir").c_str(), 0755), 0);
  EXPECT_FALSE(cache.Read("dir").has_value());

  const std::string huge = cache.PathFor("huge");
  const int fd = open(huge.c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4097), 0);
  close(fd);
  EXPECT_FALSE(cache.Read("huge").has_value());
  ASSERT_TRUE(cache.Write("huge", Sample()).ok());
  std::optional<NvrtcOutput> back = cache.Read("huge");
  ASSERT_TRUE(back.has_value());
  ExpectSame(*back, Sample());
}

TEST(DiskCacheTest, ARecordPastTheLimitIsNotWritten) {
  std::string dir = testing::TempDir() + "/disk_cache_XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  DiskCache cache(dir, /*max_record_bytes=*/4096);
  NvrtcOutput big = Sample();
  big.image.assign(4096, 'x');
  const absl::Status s = cache.Write("big", big);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("exceeds the 4096-byte limit"));
  EXPECT_FALSE(std::filesystem::exists(cache.PathFor("big")));
}

}  // namespace
}  // namespace cubed::kernels
