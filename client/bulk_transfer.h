#pragma once

// The client end of the session stream's bulk transfers (Note [Bulk transfers] in
// server/service/stream/bulk_transfers.h; docs/api.md, "Bulk transfers"): Upload and Download of
// one bulk command, joined to it by (session, seq). cubed::Client uses them for creates and reads
// larger than ClientOptions::bulk_threshold.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "grpcpp/channel.h"

namespace cubed {

// Deadline of one transfer of `bytes`: `timeout` plus one second per 64 MiB, so that a call
// still has a deadline however large it is.
absl::Duration BulkDeadline(absl::Duration timeout, uint64_t bytes);

// Sends `data` (non-empty) as the bytes of bulk create `seq` of `session`, in chunks of `chunk`
// bytes (1 .. 4 MiB), straight from `data`: each chunk's bytes go to gRPC as a slice pointing
// into `data`, without a copy (Note [Bulk wire format], bulk_transfer.cc). Blocks until the
// daemon wrote every byte and answered; returns its status (the command's error when the create
// failed). `progress` (may be empty) is told (bytes written, data.size()) after each chunk gRPC
// accepted, on this thread.
absl::Status BulkUpload(const std::shared_ptr<grpc::Channel>& channel, uint64_t session,
                        uint64_t seq, absl::Span<const uint8_t> data, uint64_t chunk,
                        absl::Duration timeout,
                        const std::function<void(uint64_t, uint64_t)>& progress = nullptr);

// Receives the bytes of bulk read `seq` of `session`: one string per binding, each allocated
// once at its final size (large ones advised to transparent huge pages) and filled by appending
// the chunks in order, without a zero-fill first (ReserveForRead). Blocks until the
// download ended. The calling thread only reads from gRPC; a helper thread it starts and joins
// copies each chunk once, from gRPC's receive buffers into the result, with at most 4 chunks
// received and not yet copied. `expected` (the caller's estimate of the total) only sets the
// deadline. A malformed chunk cancels the download and returns INTERNAL.
absl::StatusOr<std::vector<std::string>> BulkDownload(const std::shared_ptr<grpc::Channel>& channel,
                                                      uint64_t session, uint64_t seq,
                                                      uint64_t chunk, uint64_t expected,
                                                      absl::Duration timeout);

}  // namespace cubed
