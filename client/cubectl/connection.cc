#include "client/cubectl/connection.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "client/handle_state.h"
#include "common/status_macros.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace cubed::cubectl {

std::string DefaultAddress() {
  if (const char* address = std::getenv("CUBED_ADDRESS");
      address != nullptr && address[0] != '\0') {
    return address;
  }
  const char* runtime_dir = std::getenv("XDG_RUNTIME_DIR");
  const std::string per_user = (runtime_dir != nullptr && runtime_dir[0] != '\0')
                                   ? absl::StrCat(runtime_dir, "/cubed.sock")
                                   : absl::StrCat("/tmp/cubed-", getuid(), "/cubed.sock");
  constexpr const char* kService = "/run/cubed/cubed.sock";  // deploy/systemd/cubed.service
  if (access(per_user.c_str(), F_OK) != 0 && access(kService, F_OK) == 0) {
    return absl::StrCat("unix:", kService);
  }
  return absl::StrCat("unix:", per_user);
}

absl::StatusOr<GlobalOptions> ParseGlobalOptions(const Args& args) {
  GlobalOptions options;
  options.address = args.Get("address").value_or(DefaultAddress());
  if (options.address.empty()) return UsageError("--address: must not be empty");
  options.json = args.Has("json");
  options.quiet = args.Has("quiet");
  if (auto timeout = args.Get("timeout")) {
    ASSIGN_OR_RETURN(options.timeout, ParseDurationFlag("--timeout", *timeout));
  }
  if (auto session = args.Get("session")) {
    ASSIGN_OR_RETURN(options.session, ParseUint("--session", *session));
    if (options.session == 0) return UsageError("--session: 0 is not a session id");
  }
  options.security.tls_ca_file = args.Get("tls_ca").value_or("");
  options.security.tls_cert_file = args.Get("tls_cert").value_or("");
  options.security.tls_key_file = args.Get("tls_key").value_or("");
  if (auto path = args.Get("token_file")) {
    std::ifstream in(*path);
    std::string token;
    if (!std::getline(in, token) || absl::StripAsciiWhitespace(token).empty()) {
      return UsageError(absl::StrCat("--token_file: cannot read a token from ", *path));
    }
    options.security.token = std::string(absl::StripAsciiWhitespace(token));
  } else if (const char* token = std::getenv("CUBED_TOKEN"); token != nullptr) {
    options.security.token = token;
  }
  // Checked now, so that OpenChannel cannot fail later.
  if (absl::Status s =
          CreateSecureChannel(options.address, options.security, grpc::ChannelArguments()).status();
      !s.ok()) {
    return UsageError(s.message());
  }
  return options;
}

absl::StatusOr<std::unique_ptr<Client>> ConnectClient(const GlobalOptions& options) {
  ClientOptions client_options;
  client_options.address = options.address;
  client_options.timeout = options.timeout;
  client_options.session = options.session;
  client_options.tls_ca_file = options.security.tls_ca_file;
  client_options.tls_cert_file = options.security.tls_cert_file;
  client_options.tls_key_file = options.security.tls_key_file;
  client_options.token = options.security.token;
  return Client::Connect(client_options);
}

absl::Status RequireSession(const GlobalOptions& options, absl::string_view what) {
  if (options.session != 0) return absl::OkStatus();
  return UsageError(absl::StrCat(what,
                                 " needs --session=ID (from `cubectl session open`): handles of a "
                                 "temporary session end with this process"));
}

std::shared_ptr<grpc::Channel> OpenChannel(const GlobalOptions& options) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      CreateSecureChannel(options.address, options.security, grpc::ChannelArguments());
  if (channel.ok()) return *std::move(channel);
  // ParseGlobalOptions checked the same options; a file removed meanwhile gets plain TCP, which
  // a TLS daemon refuses.
  return grpc::CreateChannel(options.address, grpc::InsecureChannelCredentials());
}

void SetDeadline(const GlobalOptions& options, grpc::ClientContext* context) {
  context->set_deadline(std::chrono::system_clock::now() +
                        absl::ToChronoMilliseconds(options.timeout));
}

absl::StatusOr<Handle> AttachHandle(Client& client, uint64_t id) {
  // A State without a release batcher is never released. Its size comes from GetResource, which
  // also checks that the session holds the handle.
  // TODO(lead): this belongs in the SDK (e.g. Client::AttachHandle) rather than on
  // client/handle_state.h.
  Handle probe(std::make_shared<Handle::State>(id, 0, nullptr));
  ASSIGN_OR_RETURN(Resource resource, client.GetResource(Binding(probe)));
  return Handle(std::make_shared<Handle::State>(id, resource.size, nullptr));
}

}  // namespace cubed::cubectl
