#pragma once

// Client::Impl: the channel, stub, session and release batcher behind a cubed::Client.

#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "client/async_call.h"
#include "client/bulk_transfer.h"
#include "client/client.h"
#include "client/region_staging.h"
#include "client/release_batcher.h"
#include "client/status_conversion.h"
#include "client/stream_transport.h"
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

  // A handle owning one daemon reference of `id`, released through `batcher`; `keep_alive` goes
  // with the release (Note [Import keep-alive], release_batcher.h).
  Handle MakeHandle(uint64_t id, uint64_t size,
                    std::shared_ptr<const void> keep_alive = nullptr) const;

  ClientOptions options;
  std::shared_ptr<grpc::Channel> channel;
  // Bulk transfers' lanes (Note [Bulk lanes]): `channel`, then bulk_lanes - 1 channels of their
  // own connections; the chunk size and timeout of the options.
  BulkRoute bulk_route;
  std::unique_ptr<Stub> stub;
  uint64_t session = 0;
  bool owns_session = false;
  absl::Duration lease = absl::ZeroDuration();
  std::shared_ptr<ReleaseBatcher> batcher;
  // The session stream; null in unary mode.
  std::unique_ptr<StreamTransport> stream;
  // Recorded graphs (client/graph.cc): the next graph id, and the recording in progress.
  struct GraphRecording {
    uint64_t id = 0;
    std::vector<uint64_t> parameter_sizes;
  };
  absl::Mutex graph_mu;
  uint64_t next_graph_id ABSL_GUARDED_BY(graph_mu) = 1;
  std::optional<GraphRecording> recording ABSL_GUARDED_BY(graph_mu);
  StreamCarrier carrier = StreamCarrier::kGrpc;  // What carries it.
  absl::Duration reply_spin;                     // options.reply_spin resolved.

  // Stream mode: sends an allocation of a tensor and waits for its layout; on failure releases
  // the (poisoned) id and returns the daemon's error. A bulk create_tensor's bytes are `bulk`,
  // uploaded before waiting.
  // Stream mode: a create_tensor command of a fresh client id (returned in `id`) for `shape`;
  // the caller adds the bytes (data, bulk or region).
  v1::Command CreateTensorCommand(const std::vector<uint64_t>& shape, uint32_t elem_size,
                                  uint64_t* id) const;
  absl::StatusOr<Tensor> StreamTensor(v1::Command command, uint64_t id, std::vector<uint64_t> shape,
                                      uint32_t elem_size, absl::Span<const uint8_t> bulk = {});
  // The automatic shared-memory path (region_staging.h); null when off.
  std::unique_ptr<RegionStaging> staging;
  bool UsesRegion(uint64_t bytes) const {
    return staging != nullptr && options.region_threshold != 0 && bytes >= options.region_threshold;
  }
  // Stream mode: whether a transfer of `bytes` goes through Upload / Download.
  bool Bulk(uint64_t bytes) const {
    return stream != nullptr && options.bulk_threshold != 0 && bytes >= options.bulk_threshold;
  }
  // Stream mode: releases a poisoned id (it stays in use until released).
  void ReleasePoisoned(uint64_t id) const;
  // Stream mode: the memory_usage command, waited for.
  absl::StatusOr<MemoryUsage> StreamMemoryUsage();
  // Stream mode: returns once the daemon ran every command queued before (a memory_usage).
  absl::Status StreamBarrier();

  // Stream mode: queues `command` and returns a future of `convert(reply or stream error)`.
  template <typename Result, typename Convert>
  std::future<Result> Ask(v1::Command command, Convert convert, uint64_t* seq_out = nullptr,
                          absl::Duration timeout = absl::ZeroDuration()) const {
    auto promise = std::make_shared<std::promise<Result>>();
    auto convert_ptr = std::make_shared<Convert>(std::move(convert));
    std::future<Result> future = promise->get_future();
    absl::Status sent = stream->Send(
        std::move(command),
        [promise, convert_ptr](absl::StatusOr<v1::Reply*> reply) {
          promise->set_value((*convert_ptr)(std::move(reply)));
        },
        seq_out, timeout);
    if (!sent.ok()) promise->set_value((*convert_ptr)(absl::StatusOr<v1::Reply*>(sent)));
    return future;
  }
};

// The status a reply carries (code 0: OK), or the stream's error.
absl::Status ReplyStatus(const absl::StatusOr<v1::Reply*>& reply);

}  // namespace cubed
