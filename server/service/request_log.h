#pragma once

// Request logging at the gRPC edge: one log line per failed call, naming the method, the session
// and a request id, and nothing for calls that succeed (no per-command lines at the default
// level). The request id is the client's `x-request-id` metadata when it sends one (so both
// sides' logs can be joined), else one the daemon assigns ("d-N"); either way the failed call's
// trailing metadata carries it back as `x-request-id`.
// Client errors (bad input, unknown handle, limits) log at info; INTERNAL, UNKNOWN and DATA_LOSS
// (bugs) at error.

#include <grpcpp/support/server_interceptor.h>

#include <memory>

namespace cubed {

// For grpc::ServerBuilder::experimental().SetInterceptorCreators. Thread-safe.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> RequestLogFactory();

}  // namespace cubed
