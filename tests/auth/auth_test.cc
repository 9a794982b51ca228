// Authentication and authorization against the real daemon (docs/security.md): Unix peers by
// SO_PEERCRED and the allow-list, TCP peers by bearer token over TLS or by client certificate
// (mTLS), permissions per principal, isolation of sessions between principals, and quotas.
// Certificates come from tests/auth/make_certs.sh (openssl).

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/secure_channel.h"
#include "common/kernel_metadata.h"
#include "cubed/v1/compute.grpc.pb.h"
#include "cubed/v1/session.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/testing/daemon_process.h"

namespace cubed {
namespace {

using ::testing::HasSubstr;
using Stub = v1::Compute::Stub;

constexpr char kAliceToken[] = "alice-token-0123456789abcdef";
constexpr char kBobToken[] = "bob-token-0123456789abcdef";
constexpr char kLimitedToken[] = "limited-token-0123456789abcdef";
constexpr char kQuotaToken[] = "quota-token-0123456789abcdef";

std::string WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

class AuthTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/cubed-auth-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = new std::string(tmpl);
    const std::string cmd =
        absl::StrCat(CUBED_MAKE_CERTS, " ", *dir_, "/certs > ", *dir_, "/certs.log 2>&1");
    ASSERT_EQ(std::system(cmd.c_str()), 0) << "make_certs.sh failed; see " << *dir_;
    WriteFile(*dir_ + "/tokens",
              absl::StrCat("# principal token\nalice ", kAliceToken, "\nbob ", kBobToken,
                           "\nlimited ", kLimitedToken, "\nquota ", kQuotaToken, "\n"));
    chmod((*dir_ + "/tokens").c_str(), 0600);
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    std::filesystem::remove_all(*dir_, ec);
    delete dir_;
  }

  static std::string Cert(const std::string& name) { return *dir_ + "/certs/" + name; }

  // A config: `principals` (textproto) plus the token file.
  static std::string Config(const std::string& name, const std::string& principals) {
    return WriteFile(*dir_ + "/" + name + ".textproto",
                     absl::StrCat("token_file: \"tokens\"\n", principals));
  }

  // The usual principals: alice (this uid, Unix), bob (token), limited (token, few RPCs),
  // ci (client certificate CN ci-client).
  static std::string StandardConfig() {
    return Config("standard", absl::StrCat(R"(
      principal { name: "alice" uids: )",
                                           getuid(), R"( permissions { all_rpcs: true } }
      principal { name: "bob" permissions { all_rpcs: true } }
      principal {
        name: "limited"
        permissions { rpcs: "OpenSession" rpcs: "Create" rpcs: "Read" rpcs: "GetInfo"
                      rpcs: "MemoryUsage" rpcs: "Execute" rpcs: "Sync" rpcs: "Empty" }
      }
      principal { name: "ci" cert_common_names: "ci-client" permissions { all_rpcs: true } }
      principal { name: "quota" permissions { all_rpcs: true } }
    )"));
  }

  // Starts the daemon with TLS on TCP (mTLS when `mtls`) and `config`.
  static std::unique_ptr<testing::DaemonProcess> StartTls(const std::string& config,
                                                          bool mtls = false,
                                                          std::vector<std::string> more = {}) {
    testing::DaemonProcess::Options options;
    options.tcp = true;
    options.flags = {"--auth_config=" + config, "--tls_cert=" + Cert("server.pem"),
                     "--tls_key=" + Cert("server.key")};
    if (mtls) options.flags.push_back("--tls_client_ca=" + Cert("ca.pem"));
    for (auto& f : more) options.flags.push_back(f);
    auto d = testing::DaemonProcess::Start(options);
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? *std::move(d) : nullptr;
  }

  static std::unique_ptr<Stub> Connect(const std::string& address, ChannelSecurity security) {
    auto channel = CreateSecureChannel(address, security, grpc::ChannelArguments());
    EXPECT_TRUE(channel.ok()) << channel.status();
    return v1::Compute::NewStub(*channel);
  }
  static ChannelSecurity Tls(const std::string& token = "") {
    ChannelSecurity s;
    s.tls_ca_file = Cert("ca.pem");
    s.token = token;
    return s;
  }

  template <typename Request, typename Response>
  static grpc::Status Call(Stub& stub,
                           grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&,
                                                        Response*),
                           const Request& request, Response* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    return (stub.*method)(&context, request, response);
  }

  static uint64_t OpenSession(Stub& stub) {
    v1::OpenSessionResponse response;
    grpc::Status s = Call(stub, &Stub::OpenSession, v1::OpenSessionRequest(), &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response.session();
  }
  static grpc::Status Create(Stub& stub, uint64_t session, size_t bytes, uint64_t* handle) {
    v1::CreateRequest request;
    request.set_session(session);
    request.set_data(std::string(bytes, 'x'));
    v1::CreateResponse response;
    grpc::Status s = Call(stub, &Stub::Create, request, &response);
    if (handle != nullptr) *handle = response.handle();
    return s;
  }
  static grpc::Status Empty(Stub& stub, uint64_t session, uint64_t bytes) {
    v1::EmptyRequest request;
    request.set_session(session);
    request.set_size(bytes);
    v1::EmptyResponse response;
    return Call(stub, &Stub::Empty, request, &response);
  }
  static v1::MemoryUsage Usage(Stub& stub) {
    v1::MemoryUsageResponse response;
    grpc::Status s = Call(stub, &Stub::MemoryUsage, v1::MemoryUsageRequest(), &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response.usage();
  }
  // A well-formed `add` of three f32 vectors of 8 (32 bytes each) in `session`.
  static v1::ExecuteRequest Add(uint64_t session, uint64_t a, uint64_t b, uint64_t out) {
    v1::ExecuteRequest req;
    req.set_session(session);
    v1::BuiltinKernel* k = req.mutable_kernel()->mutable_builtin();
    k->set_name("add");
    k->set_dtype(v1::ELEM_TYPE_F32);
    v1::CubeCount::Static* count = req.mutable_count()->mutable_static_count();
    count->set_x(1);
    count->set_y(1);
    count->set_z(1);
    for (uint64_t h : {a, b, out}) req.mutable_bindings()->add_buffers()->set_handle(h);
    const TensorLayout layout = TensorLayout::Contiguous({8});
    auto metadata = EncodeKernelMetadata({8, 8, 8}, {layout, layout, layout});
    EXPECT_TRUE(metadata.ok()) << metadata.status();
    for (uint32_t w : *metadata) req.mutable_bindings()->add_metadata(w);
    return req;
  }
  static grpc::Status CloseSession(Stub& stub, uint64_t session) {
    v1::CloseSessionRequest request;
    request.set_session(session);
    v1::CloseSessionResponse response;
    return Call(stub, &Stub::CloseSession, request, &response);
  }

  static std::string* dir_;
};

std::string* AuthTest::dir_ = nullptr;

TEST_F(AuthTest, TlsTokenIdentifiesThePrincipal) {
  auto daemon = StartTls(StandardConfig());
  ASSERT_NE(daemon, nullptr);
  auto bob = Connect(daemon->tcp_address(), Tls(kBobToken));
  v1::GetInfoResponse info;
  grpc::Status s = Call(*bob, &Stub::GetInfo, v1::GetInfoRequest(), &info);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(info.devices(), 1u);
  const uint64_t session = OpenSession(*bob);
  uint64_t handle = 0;
  ASSERT_TRUE(Create(*bob, session, 64, &handle).ok());
  v1::ReadRequest read;
  read.set_session(session);
  read.add_bindings()->set_handle(handle);
  v1::ReadResponse data;
  s = Call(*bob, &Stub::Read, read, &data);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(data.data(0), std::string(64, 'x'));
  // The token is never logged.
  EXPECT_THAT(daemon->Log(), ::testing::Not(HasSubstr(kBobToken)));
}

TEST_F(AuthTest, MissingOrWrongTokenIsUnauthenticatedAndAllocatesNothing) {
  auto daemon = StartTls(StandardConfig());
  ASSERT_NE(daemon, nullptr);
  auto bob = Connect(daemon->tcp_address(), Tls(kBobToken));
  const v1::MemoryUsage before = Usage(*bob);
  for (const std::string& token :
       {std::string(), std::string("not-a-token-at-all-0000"), std::string(kBobToken) + "x"}) {
    SCOPED_TRACE(token);
    auto stranger = Connect(daemon->tcp_address(), Tls(token));
    v1::OpenSessionResponse opened;
    grpc::Status s = Call(*stranger, &Stub::OpenSession, v1::OpenSessionRequest(), &opened);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
    EXPECT_EQ(Create(*stranger, 0x1234500, 1 << 20, nullptr).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    // The session stream too.
    auto channel = CreateSecureChannel(daemon->tcp_address(), Tls(token), {});
    ASSERT_TRUE(channel.ok());
    auto streams = v1::SessionStream::NewStub(*channel);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    auto stream = streams->Session(&context);
    v1::SessionRequest open;
    open.mutable_open();
    stream->Write(open);
    stream->WritesDone();
    v1::SessionResponse response;
    EXPECT_FALSE(stream->Read(&response));
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  const v1::MemoryUsage after = Usage(*bob);
  EXPECT_EQ(after.number_allocs(), before.number_allocs());
  EXPECT_EQ(after.bytes_in_use(), before.bytes_in_use());
  EXPECT_THAT(daemon->Log(), ::testing::Not(HasSubstr("not-a-token-at-all")));
}

TEST_F(AuthTest, PlainClientCannotTalkToTheTlsListener) {
  auto daemon = StartTls(StandardConfig());
  ASSERT_NE(daemon, nullptr);
  ChannelSecurity plain;
  plain.token = kBobToken;
  auto stub = Connect(daemon->tcp_address(), plain);
  v1::GetInfoResponse info;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  EXPECT_EQ(stub->GetInfo(&context, v1::GetInfoRequest(), &info).error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

TEST_F(AuthTest, PlainTcpNeedsTheInsecureFlagWhichWarns) {
  testing::DaemonProcess::Options options;
  options.flags = {"--tcp=127.0.0.1:0"};
  auto refused = testing::DaemonProcess::Start(options);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("--insecure_tcp"));

  options.flags.push_back("--insecure_tcp");
  auto daemon = testing::DaemonProcess::Start(options);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  EXPECT_THAT((*daemon)->Log(), HasSubstr("--insecure_tcp: serving plain TCP"));
}

TEST_F(AuthTest, InsecureTcpWithoutAuthConfigWarnsThatEveryPeerMayCallEverything) {
  testing::DaemonProcess::Options options;
  options.tcp = true;  // --insecure_tcp, no --auth_config.
  auto open = testing::DaemonProcess::Start(options);
  ASSERT_TRUE(open.ok()) << open.status();
  EXPECT_THAT((*open)->Log(), HasSubstr("--insecure_tcp without --auth_config: EVERY peer"));
  // What the warning says: two peers without credentials are one principal, so the second may
  // use and close the first one's session.
  auto first = Connect((*open)->tcp_address(), {});
  auto second = Connect((*open)->tcp_address(), {});
  const uint64_t session = OpenSession(*first);
  EXPECT_TRUE(Create(*second, session, 16, nullptr).ok());
  EXPECT_TRUE(CloseSession(*second, session).ok());

  options.flags = {"--auth_config=" + StandardConfig()};
  auto configured = testing::DaemonProcess::Start(options);
  ASSERT_TRUE(configured.ok()) << configured.status();
  EXPECT_THAT((*configured)->Log(), HasSubstr("--insecure_tcp: serving plain TCP"));
  EXPECT_THAT((*configured)->Log(), ::testing::Not(HasSubstr("without --auth_config")));
}

TEST_F(AuthTest, MutualTlsIdentifiesByCertificate) {
  auto daemon = StartTls(StandardConfig(), /*mtls=*/true);
  ASSERT_NE(daemon, nullptr);
  ChannelSecurity ci = Tls();
  ci.tls_cert_file = Cert("client.pem");
  ci.tls_key_file = Cert("client.key");
  auto stub = Connect(daemon->tcp_address(), ci);
  const uint64_t session = OpenSession(*stub);
  EXPECT_NE(session, 0u);
  EXPECT_TRUE(Create(*stub, session, 16, nullptr).ok());

  // A certificate of the right CA whose CN names no principal: the handshake passes, the call
  // does not.
  ChannelSecurity stranger = Tls();
  stranger.tls_cert_file = Cert("stranger.pem");
  stranger.tls_key_file = Cert("stranger.key");
  v1::GetInfoResponse info;
  grpc::Status s =
      Call(*Connect(daemon->tcp_address(), stranger), &Stub::GetInfo, v1::GetInfoRequest(), &info);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("cert_common_names"));

  // No certificate, or one from another CA: the TLS handshake fails.
  for (const std::string& name : {std::string(), std::string("rogue")}) {
    SCOPED_TRACE(name);
    ChannelSecurity bad = Tls(kBobToken);
    if (!name.empty()) {
      bad.tls_cert_file = Cert(name + ".pem");
      bad.tls_key_file = Cert(name + ".key");
    }
    auto rejected = Connect(daemon->tcp_address(), bad);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    EXPECT_EQ(rejected->GetInfo(&context, v1::GetInfoRequest(), &info).error_code(),
              grpc::StatusCode::UNAVAILABLE);
  }
  auto alice_unix = Connect(daemon->unix_address(), {});
  EXPECT_EQ(Usage(*alice_unix).number_allocs(), 1u);  // Only ci's 16 bytes.
}

TEST_F(AuthTest, UnixPeerOutsideTheAllowListIsPermissionDenied) {
  // Only a uid that is not ours; bob (token, plain TCP) watches the memory.
  const std::string config =
      Config("others", absl::StrCat(R"(
      principal { name: "alice" uids: )",
                                    getuid() + 4242, R"( permissions { all_rpcs: true } }
      principal { name: "bob" permissions { all_rpcs: true } }
  )"));
  testing::DaemonProcess::Options options;
  options.tcp = true;  // --insecure_tcp
  options.flags = {"--auth_config=" + config};
  auto daemon = testing::DaemonProcess::Start(options);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  ChannelSecurity token;
  token.token = kBobToken;
  auto bob = Connect((*daemon)->tcp_address(), token);
  auto me = Connect((*daemon)->unix_address(), {});
  v1::OpenSessionResponse opened;
  grpc::Status s = Call(*me, &Stub::OpenSession, v1::OpenSessionRequest(), &opened);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s.error_message(), HasSubstr(absl::StrCat("uid ", getuid())));
  EXPECT_THAT(s.error_message(), HasSubstr("allow-list"));
  EXPECT_EQ(Create(*me, 0x4242400, 1024, nullptr).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Usage(*bob).number_allocs(), 0u);
  // Without a token a plain TCP peer is nobody once a config is given.
  auto anonymous = Connect((*daemon)->tcp_address(), {});
  EXPECT_EQ(Call(*anonymous, &Stub::OpenSession, v1::OpenSessionRequest(), &opened).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(AuthTest, SocketIsGroupOwnedMode0660) {
  testing::DaemonProcess::Options options;
  options.flags = {absl::StrCat("--listen_group=", getgid())};
  auto daemon = testing::DaemonProcess::Start(options);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  struct stat st;
  const std::string path = (*daemon)->unix_address().substr(5);
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  EXPECT_EQ(st.st_gid, getgid());

  options.flags = {"--listen_group=no-such-group-cubed"};
  auto refused = testing::DaemonProcess::Start(options);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("no-such-group-cubed"));
}

TEST_F(AuthTest, SecondPrincipalCannotTouchAnothersSessionOrHandles) {
  auto daemon = StartTls(StandardConfig());
  ASSERT_NE(daemon, nullptr);
  auto alice = Connect(daemon->unix_address(), {});
  auto bob = Connect(daemon->tcp_address(), Tls(kBobToken));
  const uint64_t a = OpenSession(*alice);
  uint64_t h1 = 0, h2 = 0;
  ASSERT_TRUE(Create(*alice, a, 32, &h1).ok());
  ASSERT_TRUE(Create(*alice, a, 32, &h2).ok());
  // Ids are not small sequential integers.
  EXPECT_GT(h1, uint64_t{1} << 20);
  EXPECT_GT(h1 > h2 ? h1 - h2 : h2 - h1, 1000u);
  const uint64_t b = OpenSession(*bob);

  auto expect_not_found = [](const grpc::Status& s, const std::string& what) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << what << ": " << s.error_message();
  };
  // Alice's session id named by bob: the same answer as an id nobody has.
  v1::ReadRequest read;
  read.set_session(a);
  read.add_bindings()->set_handle(h1);
  v1::ReadResponse data;
  grpc::Status s = Call(*bob, &Stub::Read, read, &data);
  expect_not_found(s, "Read");
  read.set_session(a ^ 0xffff00);
  EXPECT_EQ(
      Call(*bob, &Stub::Read, read, &data).error_message(),
      absl::StrCat("session ", a ^ 0xffff00, " is not open (closed, expired, or never opened)"));
  EXPECT_THAT(s.error_message(), HasSubstr("is not open"));
  v1::ReleaseRequest release;
  release.set_session(a);
  release.add_handles(h1);
  v1::ReleaseResponse released;
  expect_not_found(Call(*bob, &Stub::Release, release, &released), "Release");
  v1::ExecuteResponse executed;
  ASSERT_TRUE(Call(*alice, &Stub::Execute, Add(a, h1, h2, h2), &executed).ok());
  expect_not_found(Call(*bob, &Stub::Execute, Add(a, h1, h2, h2), &executed), "Execute");
  expect_not_found(CloseSession(*bob, a), "CloseSession");
  v1::GetResourceRequest resource;
  resource.set_session(a);
  resource.mutable_binding()->set_handle(h1);
  v1::GetResourceResponse described;
  expect_not_found(Call(*bob, &Stub::GetResource, resource, &described), "GetResource");
  // Alice's handle ids in bob's own session, and guessed neighbours of them.
  for (uint64_t guess : {h1, h2, h1 + 1, h2 - 1}) {
    read.set_session(b);
    read.mutable_bindings(0)->set_handle(guess);
    expect_not_found(Call(*bob, &Stub::Read, read, &data), "Read guessed handle");
    release.set_session(b);
    release.set_handles(0, guess);
    expect_not_found(Call(*bob, &Stub::Release, release, &released), "Release guessed handle");
  }
  // Alice's data is untouched and hers.
  read.set_session(a);
  read.mutable_bindings(0)->set_handle(h1);
  s = Call(*alice, &Stub::Read, read, &data);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(data.data(0), std::string(32, 'x'));
  // Bob's session is just as closed to alice.
  expect_not_found(CloseSession(*alice, b), "alice closing bob's session");
  EXPECT_TRUE(CloseSession(*bob, b).ok());
  EXPECT_TRUE(CloseSession(*alice, a).ok());
}

// docs/security.md, "Memory isolation": what one principal freed is zeroed before another
// principal's Empty hands it out (a TCP peer reading what a Unix peer released).
TEST_F(AuthTest, AnotherPrincipalNeverReadsFreedBytes) {
  auto daemon = StartTls(StandardConfig());
  ASSERT_NE(daemon, nullptr);
  auto alice = Connect(daemon->unix_address(), {});
  auto bob = Connect(daemon->tcp_address(), Tls(kBobToken));
  // A small and a medium slice (Note [Pool layout]; under gRPC's default 4 MiB receive limit).
  for (uint64_t size : {uint64_t{64}, uint64_t{3} << 20}) {
    SCOPED_TRACE(size);
    const uint64_t a = OpenSession(*alice);
    uint64_t secret = 0;
    ASSERT_TRUE(Create(*alice, a, size, &secret).ok());  // `size` bytes of 'x'.
    v1::ReleaseRequest release;
    release.set_session(a);
    release.add_handles(secret);
    v1::ReleaseResponse released;
    ASSERT_TRUE(Call(*alice, &Stub::Release, release, &released).ok());

    const uint64_t b = OpenSession(*bob);
    v1::EmptyRequest empty;
    empty.set_session(b);
    empty.set_size(size);
    v1::EmptyResponse allocated;
    ASSERT_TRUE(Call(*bob, &Stub::Empty, empty, &allocated).ok());
    v1::ReadRequest read;
    read.set_session(b);
    read.add_bindings()->set_handle(allocated.handle());
    v1::ReadResponse data;
    grpc::Status s = Call(*bob, &Stub::Read, read, &data);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(data.data_size(), 1);
    EXPECT_TRUE(data.data(0) == std::string(size, '\0'))
        << "bob read " << std::count(data.data(0).begin(), data.data(0).end(), 'x')
        << " of alice's freed bytes";
    EXPECT_TRUE(CloseSession(*alice, a).ok());
    EXPECT_TRUE(CloseSession(*bob, b).ok());
  }
}

TEST_F(AuthTest, PermissionsNameWhatIsMissing) {
  auto daemon = StartTls(StandardConfig(), false, {"--allow_unchecked"});
  ASSERT_NE(daemon, nullptr);
  auto limited = Connect(daemon->tcp_address(), Tls(kLimitedToken));
  const uint64_t session = OpenSession(*limited);
  uint64_t handle = 0;
  ASSERT_TRUE(Create(*limited, session, 64, &handle).ok());

  v1::MemoryCleanupResponse cleaned;
  grpc::Status s = Call(*limited, &Stub::MemoryCleanup, v1::MemoryCleanupRequest(), &cleaned);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s.error_message(), HasSubstr("may not call MemoryCleanup"));
  EXPECT_EQ(CloseSession(*limited, session).error_code(), grpc::StatusCode::PERMISSION_DENIED);

  // A client-shipped kernel from a TCP principal without client_kernels. (Without the check the
  // CPU backend would answer UNIMPLEMENTED, a GPU would run it.)
  v1::ExecuteRequest execute;
  execute.set_session(session);
  execute.mutable_kernel()->mutable_cuda_source()->set_source(
      "extern \"C\" __global__ void k(float* x) { x[0] = 1; }");
  execute.mutable_kernel()->mutable_cuda_source()->set_entry_point("k");
  execute.mutable_kernel()->mutable_cuda_source()->mutable_cube_dim()->set_x(1);
  execute.mutable_kernel()->mutable_cuda_source()->mutable_cube_dim()->set_y(1);
  execute.mutable_kernel()->mutable_cuda_source()->mutable_cube_dim()->set_z(1);
  execute.mutable_count()->mutable_static_count()->set_x(1);
  execute.mutable_count()->mutable_static_count()->set_y(1);
  execute.mutable_count()->mutable_static_count()->set_z(1);
  execute.mutable_bindings()->add_buffers()->set_handle(handle);
  v1::ExecuteResponse executed;
  s = Call(*limited, &Stub::Execute, execute, &executed);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("client_kernels"));

  // Unchecked mode, allowed by the daemon but not granted to the principal; checked runs.
  uint64_t small = 0;
  ASSERT_TRUE(Create(*limited, session, 32, &small).ok());
  v1::ExecuteRequest add = Add(session, small, small, small);
  s = Call(*limited, &Stub::Execute, add, &executed);
  EXPECT_TRUE(s.ok()) << s.error_message();
  add.set_mode(v1::EXECUTION_MODE_UNCHECKED);
  s = Call(*limited, &Stub::Execute, add, &executed);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("permissions.unchecked"));

  // The same rules inside the session stream: a command the principal may not run fails in its
  // place with PERMISSION_DENIED.
  auto channel = CreateSecureChannel(daemon->tcp_address(), Tls(kLimitedToken), {});
  ASSERT_TRUE(channel.ok());
  auto streams = v1::SessionStream::NewStub(*channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto stream = streams->Session(&context);
  v1::SessionRequest request;
  request.mutable_open();
  v1::Command* cleanup = request.add_commands();
  cleanup->set_seq(1);
  cleanup->mutable_memory_cleanup();
  v1::Command* usage = request.add_commands();
  usage->set_seq(2);
  usage->mutable_memory_usage();
  v1::Command* sync = request.add_commands();
  sync->set_seq(3);
  sync->mutable_sync();
  ASSERT_TRUE(stream->Write(request));
  stream->WritesDone();
  std::vector<v1::Reply> replies;
  v1::SessionResponse response;
  while (stream->Read(&response)) {
    for (const v1::Reply& r : response.replies()) replies.push_back(r);
  }
  EXPECT_TRUE(stream->Finish().ok());
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_EQ(replies[0].code(), 0) << replies[0].message();  // memory_usage is allowed.
  EXPECT_EQ(replies[1].code(), static_cast<int>(grpc::StatusCode::PERMISSION_DENIED));
  EXPECT_THAT(replies[1].message(), HasSubstr("may not call MemoryCleanup"));
}

TEST_F(AuthTest, QuotasAreEnforcedAndNamed) {
  const std::string config = Config("quotas", R"(
      principal {
        name: "quota"
        permissions { all_rpcs: true }
        quotas { max_bytes: 3000 max_handles: 4 max_sessions: 2 max_session_bytes: 2000
                 max_session_handles: 3 }
      }
      principal { name: "bob" permissions { all_rpcs: true } }
  )");
  auto daemon = StartTls(config);
  ASSERT_NE(daemon, nullptr);
  auto q = Connect(daemon->tcp_address(), Tls(kQuotaToken));
  auto bob = Connect(daemon->tcp_address(), Tls(kBobToken));
  const v1::MemoryUsage baseline = Usage(*bob);

  auto expect_exhausted = [](const grpc::Status& s, const std::string& quota) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(quota));
    EXPECT_THAT(s.error_message(), HasSubstr("principal 'quota'"));
  };
  const uint64_t s1 = OpenSession(*q);
  const uint64_t s2 = OpenSession(*q);
  v1::OpenSessionResponse opened;
  expect_exhausted(Call(*q, &Stub::OpenSession, v1::OpenSessionRequest(), &opened), "max_sessions");

  // Per session: bytes, then handles.
  EXPECT_EQ(Empty(*q, s1, 1500).error_code(), grpc::StatusCode::OK);
  expect_exhausted(Empty(*q, s1, 600), "max_session_bytes");
  EXPECT_TRUE(Create(*q, s1, 10, nullptr).ok());
  EXPECT_TRUE(Create(*q, s1, 10, nullptr).ok());
  expect_exhausted(Create(*q, s1, 10, nullptr), "max_session_handles");
  // Over all the principal's sessions: bytes (1520 held), then handles (3 held).
  expect_exhausted(Empty(*q, s2, 1500), "max_bytes");
  EXPECT_TRUE(Create(*q, s2, 10, nullptr).ok());
  expect_exhausted(Create(*q, s2, 10, nullptr), "max_handles");
  // Refused allocations left nothing behind.
  EXPECT_EQ(Usage(*bob).number_allocs(), baseline.number_allocs() + 4);

  // Bob is not limited by quota's quotas.
  const uint64_t b = OpenSession(*bob);
  EXPECT_TRUE(Empty(*bob, b, 100000).ok());
  EXPECT_TRUE(CloseSession(*bob, b).ok());

  // Ending the sessions gives everything back: memory and quota.
  EXPECT_TRUE(CloseSession(*q, s1).ok());
  EXPECT_TRUE(CloseSession(*q, s2).ok());
  const v1::MemoryUsage after = Usage(*bob);
  EXPECT_EQ(after.number_allocs(), baseline.number_allocs());
  EXPECT_EQ(after.bytes_in_use(), baseline.bytes_in_use());
  const uint64_t s3 = OpenSession(*q);
  EXPECT_TRUE(Empty(*q, s3, 1900).ok());
  EXPECT_TRUE(CloseSession(*q, s3).ok());
}

TEST_F(AuthTest, InflightQuotasFailTheCommandsOverThem) {
  const std::string config = Config("inflight", R"(
      principal {
        name: "quota"
        permissions { all_rpcs: true }
        quotas { max_inflight_commands: 3 max_session_inflight_commands: 4 }
      }
  )");
  auto daemon = StartTls(config);
  ASSERT_NE(daemon, nullptr);
  auto channel = CreateSecureChannel(daemon->tcp_address(), Tls(kQuotaToken), {});
  ASSERT_TRUE(channel.ok());
  auto streams = v1::SessionStream::NewStub(*channel);
  // `n` answering commands in one SessionRequest of a new stream; their replies.
  auto run = [&](int n) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    auto stream = streams->Session(&context);
    v1::SessionRequest request;
    request.mutable_open();
    for (int i = 1; i <= n; ++i) {
      v1::Command* c = request.add_commands();
      c->set_seq(i);
      c->mutable_memory_usage();
    }
    EXPECT_TRUE(stream->Write(request));
    stream->WritesDone();
    std::vector<v1::Reply> replies;
    v1::SessionResponse response;
    while (stream->Read(&response)) {
      for (const v1::Reply& r : response.replies()) replies.push_back(r);
    }
    EXPECT_TRUE(stream->Finish().ok());
    return replies;
  };
  // Ten at once: three fit the principal's quota, a fourth the stream's, the rest neither.
  std::vector<v1::Reply> replies = run(10);
  ASSERT_EQ(replies.size(), 10u);
  for (int i = 0; i < 10; ++i) {
    SCOPED_TRACE(i);
    if (i < 3) {
      EXPECT_EQ(replies[i].code(), 0) << replies[i].message();
      continue;
    }
    EXPECT_EQ(replies[i].code(), static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED));
    EXPECT_THAT(replies[i].message(), HasSubstr(i == 3 ? "quota max_inflight_commands"
                                                       : "max_session_inflight_commands"));
  }
  // The slots came back when the commands ran: the next stream gets all three again.
  replies = run(3);
  ASSERT_EQ(replies.size(), 3u);
  for (const v1::Reply& r : replies) EXPECT_EQ(r.code(), 0) << r.message();
}

TEST_F(AuthTest, BadConfigIsRefusedWithTheLine) {
  const std::string config = Config("bad", R"(
      principal { name: "alice"
        permisions { all_rpcs: true }
      }
  )");
  testing::DaemonProcess::Options options;
  options.flags = {"--auth_config=" + config};
  auto refused = testing::DaemonProcess::Start(options);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("bad.textproto:4:"));
  EXPECT_THAT(refused.status().message(), HasSubstr("permisions"));

  const std::string rpc = Config("rpc", R"(principal { name: "x" permissions { rpcs: "Crate" } })");
  options.flags = {"--auth_config=" + rpc};
  refused = testing::DaemonProcess::Start(options);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("'Crate' is not an RPC of cubed.v1.Compute"));
}

}  // namespace
}  // namespace cubed
