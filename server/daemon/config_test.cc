#include "server/daemon/config.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace cubed
