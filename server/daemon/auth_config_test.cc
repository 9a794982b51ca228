#include "server/daemon/auth_config.h"

#include "gtest/gtest.h"
#include "server/daemon/config.h"
#include "server/service/authenticator.h"

namespace cubed {
namespace {

TEST(AuthConfigTest, ParsesPrincipalsPermissionsAndQuotas) {
  absl::StatusOr<AuthPolicy> policy = ParseAuthConfig(R"(
    principal { name: "alice" uids: 1000 gids: 7 permissions { all_rpcs: true unchecked: true } }
    principal {
      name: "ci" cert_common_names: "ci.example.com"
      permissions { rpcs: "Create" rpcs: "Read" client_kernels: true }
      quotas { max_bytes: 4096 max_handles: 3 max_inflight_commands: 9 max_sessions: 2
               max_session_bytes: 1024 max_session_handles: 1 max_session_inflight_commands: 5 }
    }
  )",
                                                      "test", "");
  ASSERT_TRUE(policy.ok()) << policy.status();
  ASSERT_EQ(policy->principals.size(), 2u);
  const Principal& alice = *policy->principals[0];
  EXPECT_EQ(alice.uids, std::vector<uint32_t>{1000});
  EXPECT_TRUE(alice.CheckRpc("MemoryCleanup").ok());
  EXPECT_TRUE(alice.CheckExecute(false, true).ok());
  EXPECT_EQ(alice.CheckExecute(true, false).code(), absl::StatusCode::kPermissionDenied);
  const Principal& ci = *policy->principals[1];
  EXPECT_TRUE(ci.CheckRpc("Read").ok());
  EXPECT_EQ(ci.CheckRpc("Execute").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ci.quotas.max_session_inflight_commands, 5u);
  EXPECT_EQ(ci.quotas.max_bytes, 4096u);
  EXPECT_EQ(policy->anonymous_tcp, nullptr);
}

TEST(AuthConfigTest, ErrorsNameTheLineOrTheField) {
  auto syntax = ParseAuthConfig("principal {\n  name: \"a\"\n  uid: 3\n}\n", "cfg", "");
  EXPECT_EQ(syntax.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(syntax.status().message().find("cfg:3:"), absl::string_view::npos) << syntax.status();
  auto twice = ParseAuthConfig("principal { name: \"a\" } principal { name: \"a\" }", "cfg", "");
  EXPECT_NE(twice.status().message().find("used twice"), absl::string_view::npos);
  auto name = ParseAuthConfig("principal { name: \"a b\" }", "cfg", "");
  EXPECT_NE(name.status().message().find("name 'a b'"), absl::string_view::npos);
  auto tokens = ParseAuthConfig("token_file: \"/nonexistent/tokens\"", "cfg", "");
  EXPECT_NE(tokens.status().message().find("/nonexistent/tokens"), absl::string_view::npos);
}

TEST(AuthConfigTest, InflightSlotsAreBounded) {
  Principal p;
  p.name = "p";
  p.quotas.max_inflight_commands = 3;
  EXPECT_EQ(p.AcquireInflightUpTo(2), 2u);
  EXPECT_TRUE(p.AcquireInflight().ok());
  EXPECT_EQ(p.AcquireInflight().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(p.AcquireInflightUpTo(5), 0u);
  p.ReleaseInflight(3);
  EXPECT_EQ(p.AcquireInflightUpTo(5), 3u);
}

TEST(AuthConfigTest, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("secret-token", "secret-token"));
  EXPECT_FALSE(ConstantTimeEquals("secret-token", "secret-tokeN"));
  EXPECT_FALSE(ConstantTimeEquals("secret", "secret-token"));
  EXPECT_FALSE(ConstantTimeEquals("secret-token-longer", "secret-token"));
  EXPECT_FALSE(ConstantTimeEquals("", "x"));
}

TEST(AuthConfigTest, TcpNeedsTlsOrTheInsecureFlag) {
  DaemonConfig c;
  c.tcp_address = "127.0.0.1:0";
  EXPECT_EQ(CheckTransportSecurity(c).code(), absl::StatusCode::kInvalidArgument);
  c.insecure_tcp = true;
  EXPECT_TRUE(CheckTransportSecurity(c).ok());
  c.tls_cert = "c.pem";
  EXPECT_FALSE(CheckTransportSecurity(c).ok());  // Both.
  c.insecure_tcp = false;
  EXPECT_FALSE(CheckTransportSecurity(c).ok());  // Cert without key.
  c.tls_key = "k.pem";
  EXPECT_TRUE(CheckTransportSecurity(c).ok());
  c.tcp_address.clear();
  EXPECT_FALSE(CheckTransportSecurity(c).ok());  // TLS without --tcp.
}

}  // namespace
}  // namespace cubed
