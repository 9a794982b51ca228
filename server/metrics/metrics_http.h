#pragma once

// MetricsHttpServer: serves the daemon's metrics in the Prometheus text format over plain HTTP
// (cpp-httplib): GET /metrics answers 200 with the text, any other path 404. Off unless the
// daemon is started with --metrics_listen=HOST:PORT. No authentication: bind it to loopback or a
// monitoring network.

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace cubed {

// Thread-safe. `render` runs on the server's threads (at most two at once) and may block.
class MetricsHttpServer {
 public:
  // The body of GET /metrics; an error answers 503 with its message.
  using Render = std::function<absl::StatusOr<std::string>()>;

  // Binds `address` ("HOST:PORT", "[IPv6]:PORT"; port 0 picks a free one) and starts serving.
  // INVALID_ARGUMENT for a malformed address; UNAVAILABLE when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& address,
                                                                  Render render);
  // Stops serving (see Stop).
  ~MetricsHttpServer();

  // The bound address, e.g. "127.0.0.1:9464" (the port picked when 0 was asked for).
  const std::string& address() const { return address_; }
  int port() const { return port_; }

  // Closes the listener and waits for requests in progress. Idempotent.
  void Stop();

 private:
  MetricsHttpServer() = default;

  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::string address_;
  int port_ = 0;
};

}  // namespace cubed
