#include "client/secure_channel.h"

#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/client_interceptor.h"

namespace cubed {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, absl::string_view what) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  if (!in || ss.str().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": cannot read ", path));
  }
  return ss.str();
}

// Adds "authorization: Bearer TOKEN" to every call's initial metadata. An interceptor rather
// than call credentials, so that it works on plain TCP (--insecure_tcp) as well as TLS.
class TokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit TokenInterceptor(const std::string* value) : value_(value) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({"authorization", *value_});
    }
    methods->Proceed();
  }

 private:
  const std::string* value_;  // Owned by the factory, which the channel keeps.
};

class TokenInterceptorFactory final : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit TokenInterceptorFactory(const std::string& token) : value_("Bearer " + token) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new TokenInterceptor(&value_);
  }

 private:
  const std::string value_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateSecureChannel(const std::string& address,
                                                                   const ChannelSecurity& security,
                                                                   grpc::ChannelArguments args) {
  const bool tls = !security.tls_ca_file.empty();
  if (!tls && (!security.tls_cert_file.empty() || !security.tls_key_file.empty())) {
    return absl::InvalidArgumentError(
        "a client certificate (mTLS) needs TLS: set the CA file (tls_ca_file / --tls_ca) too");
  }
  if (security.tls_cert_file.empty() != security.tls_key_file.empty()) {
    return absl::InvalidArgumentError("the client certificate and its key go together");
  }
  if (tls && absl::StartsWith(address, "unix:")) {
    return absl::InvalidArgumentError(
        "TLS is for TCP addresses; a Unix socket is authenticated by the peer's uid");
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (tls) {
    grpc::SslCredentialsOptions ssl;
    auto ca = ReadPem(security.tls_ca_file, "TLS CA");
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *std::move(ca);
    if (!security.tls_cert_file.empty()) {
      auto cert = ReadPem(security.tls_cert_file, "TLS client certificate");
      if (!cert.ok()) return cert.status();
      auto key = ReadPem(security.tls_key_file, "TLS client key");
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = *std::move(cert);
      ssl.pem_private_key = *std::move(key);
    }
    credentials = grpc::SslCredentials(ssl);
    if (!security.tls_server_name.empty()) {
      args.SetSslTargetNameOverride(security.tls_server_name);
    }
  }
  if (security.token.empty()) return grpc::CreateCustomChannel(address, credentials, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<TokenInterceptorFactory>(security.token));
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, credentials, args,
                                                                 std::move(factories));
}

}  // namespace cubed
