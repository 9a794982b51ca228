#pragma once

// Client::Impl: the channel, stub, session and release batcher behind a cubed::Client.

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "client/async_call.h"
#include "client/client.h"
#include "client/release_batcher.h"
#include "client/status_conversion.h"
#include "cubed/v1/compute.grpc.pb.h"
#include "grpcpp/channel.h"

namespace cubed {

// Immutable after Connect() except for the batcher's own state, so every method may run on many
// threads at once.
class Client::Impl {
 public:
  using Stub = v1::Compute::Stub;

  // Runs one blocking unary RPC `method` with the options' deadline; the status names `rpc`.
  template <typename Request, typename Response>
  absl::Status Call(absl::string_view rpc,
                    grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Response*),
                    const Request& request, Response* response) const {
    grpc::ClientContext context;
    SetDeadline(&context, options.timeout);
    return FromGrpcStatus(((*stub).*method)(&context, request, response), rpc);
  }

  // A handle owning one daemon reference of `id`, released through `batcher`.
  Handle MakeHandle(uint64_t id, uint64_t size) const;

  ClientOptions options;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<Stub> stub;
  uint64_t session = 0;
  bool owns_session = false;
  absl::Duration lease = absl::ZeroDuration();
  std::shared_ptr<ReleaseBatcher> batcher;
};

}  // namespace cubed
