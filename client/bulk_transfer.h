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

// Where the bytes of bulk transfers go (Note [Bulk lanes], server/service/stream/
// bulk_transfers.h): lane 0 on channels[0] (the session's channel), lane i on channels[i], each
// channel with a connection of its own; a transfer uses ChooseBulkLanes(bytes, channels.size(),
// lane_bytes) lanes at once.
struct BulkRoute {
  std::vector<std::shared_ptr<grpc::Channel>> channels;  // At least one.
  uint64_t lane_bytes = 0;                               // Fewest bytes per lane (0: no minimum).
  uint64_t chunk = uint64_t{4} << 20;                    // Chunk size, 1 .. 4 MiB.
  absl::Duration timeout;                                // BulkDeadline's `timeout`.
};

// Sends `data` (non-empty) as the bytes of bulk create `seq` of `session`, in chunks of
// route.chunk bytes, straight from `data`: each chunk's bytes go to gRPC as a slice pointing
// into `data`, without a copy (Note [Bulk wire format], bulk_transfer.cc). With several lanes,
// lane 0 runs on this thread and each other lane on a thread of its own (joined before it
// returns). Blocks until the daemon wrote every byte and answered; returns its status (the
// command's error when the create failed; the first lane's error that is not a cancel caused by
// another's). `progress` (may be empty) is told (bytes of every lane gRPC accepted, data.size())
// on this thread, after each chunk of lane 0 and once at the end.
absl::Status BulkUpload(const BulkRoute& route, uint64_t session, uint64_t seq,
                        absl::Span<const uint8_t> data,
                        const std::function<void(uint64_t, uint64_t)>& progress = nullptr);

// Receives the bytes of bulk read `seq` of `session`: one string per binding, each allocated
// once at its final size (large ones advised to transparent huge pages). One lane fills it by
// appending the chunks in order, without a zero-fill first (ReserveForRead); several lanes
// (their chunks come in any order) zero-fill it first (SizeForRead) and copy each chunk to its
// place. Blocks until every lane ended. Each lane's reading thread (this one for lane 0) only
// reads from gRPC; a helper thread per lane copies each chunk once, from gRPC's receive buffers
// into the result, with at most 4 chunks received and not yet copied. `expected` (the caller's
// estimate of the total) only sets the deadline and the lane count. A malformed chunk cancels
// the download and returns INTERNAL.
absl::StatusOr<std::vector<std::string>> BulkDownload(const BulkRoute& route, uint64_t session,
                                                      uint64_t seq, uint64_t expected);

// As BulkDownload, but the bytes of every binding, one after the other, are copied straight from
// gRPC's receive buffers into `into` (no result strings, no zero-fill); returns how many bytes
// that is. `into` must stay valid until it returns, which is once every lane ended, whatever
// the outcome: nothing is written to it afterwards. OUT_OF_RANGE (the download cancelled) when
// the read holds more than into.size() bytes.
absl::StatusOr<uint64_t> BulkDownloadInto(const BulkRoute& route, uint64_t session, uint64_t seq,
                                          absl::Span<uint8_t> into);

}  // namespace cubed
