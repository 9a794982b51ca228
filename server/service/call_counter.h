#pragma once

// CallCounter: how many gRPC calls the daemon's server is running right now, counted by a server
// interceptor. Shutdown uses it to tell "calls still draining" from "only idle connections left"
// (Note [Idle connections at shutdown], daemon.cc).

#include <grpcpp/support/server_interceptor.h>

#include <atomic>
#include <cstdint>
#include <memory>

namespace cubed {

// Thread-safe. Must outlive the gRPC server its factory is installed on.
class CallCounter {
 public:
  // For grpc::ServerBuilder::experimental().SetInterceptorCreators. A call counts from the moment
  // gRPC hands it to the C++ layer (before the service's handler runs) until gRPC destroys it,
  // after its status went out (or it was cancelled). Calls of every service are counted.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> InterceptorFactory();

  // Calls running now; 0 when the server holds only idle connections.
  int64_t in_flight() const { return in_flight_.load(std::memory_order_acquire); }

 private:
  std::atomic<int64_t> in_flight_{0};
};

}  // namespace cubed
