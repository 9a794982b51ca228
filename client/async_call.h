#pragma once

// AsyncUnaryCall: runs one unary RPC through gRPC's callback API and hands its result to a
// std::future, so no thread blocks while the call is in flight.

#include <future>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/status_conversion.h"
#include "grpcpp/client_context.h"

namespace cubed {

// Sets `timeout` from now as the deadline of `context` (none when infinite).
inline void SetDeadline(grpc::ClientContext* context, absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) return;
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

// Starts the call with `start(context, request, response, on_done)`, where `start` wraps a
// `stub->async()->Method(...)`. When it completes (on a gRPC thread), the future receives
// `finish(absl::Status, Response*)`: the converted status (prefixed with `rpc`, a literal that
// outlives the call) and the response, which `finish` may move from. Context, request and
// response live until then.
template <typename Result, typename Request, typename Response, typename Start, typename Finish>
std::future<Result> AsyncUnaryCall(absl::string_view rpc, absl::Duration timeout, Request request,
                                   Start start, Finish finish) {
  struct Call {
    grpc::ClientContext context;
    Request request;
    Response response;
    std::promise<Result> promise;
  };
  auto* call = new Call;
  call->request = std::move(request);
  SetDeadline(&call->context, timeout);
  std::future<Result> future = call->promise.get_future();
  start(&call->context, &call->request, &call->response,
        [call, rpc, finish = std::move(finish)](grpc::Status status) mutable {
          Result result = finish(FromGrpcStatus(status, rpc), &call->response);
          std::promise<Result> promise = std::move(call->promise);
          // Free the call before the waiter wakes: it may destroy the Client (and its channel)
          // right after (Note [gRPC lifetime] in client.cc).
          delete call;
          promise.set_value(std::move(result));
        });
  return future;
}

}  // namespace cubed
