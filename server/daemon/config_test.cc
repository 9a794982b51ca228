#include "server/daemon/config.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace cubed {
namespace {

TEST(ParseByteSizeTest, AcceptsPlainAndSuffixedSizes) {
  EXPECT_EQ(*ParseByteSize("1048576"), 1048576u);
  EXPECT_EQ(*ParseByteSize("512KiB"), 512u << 10);
  EXPECT_EQ(*ParseByteSize("64MiB"), 64u << 20);
  EXPECT_EQ(*ParseByteSize("8GiB"), uint64_t{8} << 30);
  EXPECT_EQ(*ParseByteSize("1.5GiB"), uint64_t{3} << 29);
  EXPECT_EQ(*ParseByteSize("0"), 0u);
}

TEST(ParseByteSizeTest, RejectsGarbageWithTheText) {
  for (const char* bad : {"", "abc", "-1", "12XB", "1e30GiB", "MiB"}) {
    absl::StatusOr<uint64_t> r = ParseByteSize(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(bad), absl::string_view::npos) << r.status();
  }
}

TEST(ParseUnixSocketFlagTest, TakesAPathOrUnixColonPath) {
  EXPECT_EQ(*ParseUnixSocketFlag("--listen", "/run/cubed/cubed.sock"), "/run/cubed/cubed.sock");
  EXPECT_EQ(*ParseUnixSocketFlag("--listen", "unix:/run/cubed/cubed.sock"),
            "/run/cubed/cubed.sock");
  EXPECT_EQ(*ParseUnixSocketFlag("--listen", "unix:///run/cubed/cubed.sock"),
            "/run/cubed/cubed.sock");
  EXPECT_EQ(*ParseUnixSocketFlag("--listen", "unix:cubed.sock"), "cubed.sock");
  EXPECT_EQ(*ParseUnixSocketFlag("--listen", "cubed.sock"), "cubed.sock");
  EXPECT_EQ(*ParseUnixSocketFlag("--listen", "./a:b.sock"), "./a:b.sock");
  EXPECT_EQ(*ParseUnixSocketFlag("--listen", "/tmp/a:b.sock"), "/tmp/a:b.sock");
  EXPECT_EQ(*ParseUnixSocketFlag("--listen", ""), "");  // No Unix listener.
}

TEST(ParseUnixSocketFlagTest, RefusesOtherSchemesNamingTheFlagAndTheValue) {
  for (const char* bad : {"tcp:127.0.0.1:5000", "dns:///localhost:5000", "unix-abstract:cubed",
                          "http://localhost/x.sock", "localhost:50051", "[::1]:50051",
                          "unix:", "unix://", "unix://relative.sock", "a:b.sock"}) {
    absl::StatusOr<std::string> r = ParseUnixSocketFlag("--listen", bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(absl::StrCat("--listen=", bad, ": ")),
              absl::string_view::npos)
        << r.status();
    EXPECT_NE(r.status().message().find("PATH or unix:PATH"), absl::string_view::npos);
    EXPECT_NE(r.status().message().find("--tcp=HOST:PORT"), absl::string_view::npos);
  }
}

TEST(ParseDevicesFlagTest, TakesAllOrDistinctOrdinals) {
  absl::StatusOr<DeviceSelection> all = ParseDevicesFlag("all");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_TRUE(all->all);
  EXPECT_TRUE(all->ordinals.empty());
  absl::StatusOr<DeviceSelection> two = ParseDevicesFlag("1, 0");
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_FALSE(two->all);
  EXPECT_EQ(two->ordinals, (std::vector<uint32_t>{1, 0}));  // Index 0 serves ordinal 1.
  absl::StatusOr<DeviceSelection> most = ParseDevicesFlag("0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15");
  ASSERT_TRUE(most.ok()) << most.status();
  EXPECT_EQ(most->ordinals.size(), kMaxDevices);
}

TEST(ParseDevicesFlagTest, RepeatsOnlyWhenAllowed) {
  absl::StatusOr<DeviceSelection> twice = ParseDevicesFlag("0,0", /*allow_repeats=*/true);
  ASSERT_TRUE(twice.ok()) << twice.status();
  EXPECT_EQ(twice->ordinals, (std::vector<uint32_t>{0, 0}));
  EXPECT_FALSE(ParseDevicesFlag("0,0").ok());
}

TEST(ParseDevicesFlagTest, RefusesBadListsNamingWhatIsWrong) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "an empty entry"},
      {"0,,1", "an empty entry"},
      {"0,", "an empty entry"},
      {"zero", "'zero' is not a device ordinal"},
      {"-1", "'-1' is not a device ordinal"},
      {"0,1,0", "device 0 is listed twice"},
      {"0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16", "more than 16 devices"},
  };
  for (const auto& [value, why] : cases) {
    absl::StatusOr<DeviceSelection> r = ParseDevicesFlag(value);
    ASSERT_FALSE(r.ok()) << value;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(absl::StrCat("--devices=", value, ": ", why)),
              absl::string_view::npos)
        << r.status();
  }
}

}  // namespace
}  // namespace cubed
