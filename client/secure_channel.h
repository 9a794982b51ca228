#pragma once

// The gRPC channel to a daemon with the transport security a client asked for: plain (Unix
// socket, or TCP to a daemon started with --insecure_tcp), TLS, or mTLS, plus a bearer token on
// every call. docs/security.md describes the daemon's side.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/channel.h"
#include "grpcpp/support/channel_arguments.h"

namespace cubed {

struct ChannelSecurity {
  std::string tls_ca_file;      // TLS when set: PEM CA of the daemon's certificate.
  std::string tls_cert_file;    // mTLS: PEM client certificate chain ...
  std::string tls_key_file;     // ... and its key.
  std::string tls_server_name;  // Overrides the name checked against the certificate.
  std::string token;            // "authorization: Bearer TOKEN" on every call; empty = none.
};

// A channel to `address` ("unix:PATH" or "host:port"). INVALID_ARGUMENT naming the file that
// cannot be read, or a client certificate without its key (or the reverse), or TLS files for a
// Unix socket. The token is never put in a message.
absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateSecureChannel(const std::string& address,
                                                                   const ChannelSecurity& security,
                                                                   grpc::ChannelArguments args);

}  // namespace cubed
