#pragma once

// How cubectl reaches the daemon: the global flags, the SDK client and a raw channel for the
// RPCs the SDK does not wrap (health, sessions that outlive the process).

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/cubectl/args.h"
#include "client/secure_channel.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"

namespace cubed::cubectl {

// --address, --json, --quiet, --timeout, --session.
struct GlobalOptions {
  std::string address;
  bool json = false;
  bool quiet = false;  // No progress bars.
  absl::Duration timeout = absl::Seconds(30);
  uint64_t session = 0;  // 0: none given.
  // --tls_ca, --tls_cert, --tls_key; the token from --token_file or $CUBED_TOKEN.
  ChannelSecurity security;
};

// $CUBED_ADDRESS when set; else the daemon's per-user default socket
// (unix:$XDG_RUNTIME_DIR/cubed.sock, else unix:/tmp/cubed-$UID/cubed.sock) when it exists, else the
// system service's unix:/run/cubed/cubed.sock when that exists, else the per-user one.
std::string DefaultAddress();

// Reads the global flags; usage error for a malformed value.
absl::StatusOr<GlobalOptions> ParseGlobalOptions(const Args& args);

// Connects the SDK: joins --session when given, else opens a session that closes on exit.
absl::StatusOr<std::unique_ptr<Client>> ConnectClient(const GlobalOptions& options);

// Usage error unless --session was given; `what` says what needs it.
absl::Status RequireSession(const GlobalOptions& options, absl::string_view what);

// A gRPC channel to the daemon, for stubs the SDK does not cover.
std::shared_ptr<grpc::Channel> OpenChannel(const GlobalOptions& options);

// Sets the --timeout deadline on `context`.
void SetDeadline(const GlobalOptions& options, grpc::ClientContext* context);

// A handle of the joined session by id, e.g. one `cubectl create` printed earlier. The handle is
// never released by this process. NOT_FOUND from the daemon when the session does not hold it.
absl::StatusOr<Handle> AttachHandle(Client& client, uint64_t id);

}  // namespace cubed::cubectl
