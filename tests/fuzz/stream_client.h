#pragma once

// StreamClient: one cubed.v1.SessionStream as session_stream.cc runs it, without gRPC: each
// command is converted (ToStreamCommand, then the principal's checks), run by a StreamRunner, and
// a bulk command (Note [Bulk transfers], server/service/stream/bulk_transfers.h) is carried
// through its transfer by a simulated client: upload chunks written with Device::WritePiece,
// download pieces cut by BulkReadPlan and read with Device::ReadPiece, then
// StreamRunner::FinishBulk, as BulkTransfers does. Checks, besides the sink's: no exception, a
// failed command (other than release, which releases what it can) leaves memory unchanged, a
// successful read answers what its bindings address, a download's pieces add up to its sizes. The
// stream's session and ids are entered in the UnaryClient, so that unary requests can name them
// too. Single-threaded.

#include <cstdint>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/ids.h"
#include "cubed/v1/session.pb.h"
#include "server/channel/stream_command.h"
#include "server/channel/stream_runner.h"
#include "tests/fuzz/harness.h"
#include "tests/fuzz/unary_client.h"

namespace cubed::fuzz {

// How the simulated client moves a bulk command's bytes.
struct Transfer {
  // Download: DownloadRequest.chunk_bytes (0: 256 KiB here; above 4 MiB the Download is refused).
  // Upload: bytes per chunk, sent in order (0 = 4 MiB).
  uint64_t chunk_bytes = 0;
  // Upload: when set, these chunks (offset, bytes) instead of the in-order ones.
  bool explicit_chunks = false;
  std::vector<std::pair<uint64_t, uint64_t>> chunks;
  // The client cancels the transfer after this many chunks.
  uint64_t cancel_after = std::numeric_limits<uint64_t>::max();
};

class StreamClient {
 public:
  explicit StreamClient(UnaryClient& unary) : unary_(unary) {}
  ~StreamClient() { Close(); }

  // Opens the stream's session (the first SessionRequest's `open`); false when refused.
  // `quota_owner`: for Fixture::quota_owner, whose permissions then apply to the commands.
  bool Open(const v1::SessionRequest::Open& open, bool quota_owner);
  bool is_open() const { return runner_ != nullptr; }
  // The stream's session; SessionId() (0) when no stream is open.
  SessionId session() const { return runner_ == nullptr ? SessionId() : runner_->session(); }

  // Converts and runs one command of an open stream; a bulk one moves its bytes as `transfer`
  // says. The command's payload is moved out.
  void Run(v1::Command& command, const Transfer& transfer = {});

  // Ends the stream as its end does (every reply slot filled, the session closed). Idempotent.
  void Close();

 private:
  Device& device() { return unary_.device(); }
  // Note [Magnitude feedback] (magnitude.h) for the sizes a converted command asks for.
  void Observe(const StreamCommand& command);
  void RunPlain(StreamCommand& command);
  void RunBulk(StreamCommand& command, const Transfer& transfer);
  // The transfer of a bulk command StartBulk accepted; returns what FinishBulk is passed.
  absl::Status Upload(const StreamCommand& command, const Transfer& transfer);
  absl::Status Download(const StreamCommand& command, const Transfer& transfer);
  // Enters the id of a create the stream ran (`size` 0: it failed).
  void Created(const StreamCommand& command, uint64_t size);
  // Checks the read reply in `slot` of a read / read_tensor command.
  void CheckReadReply(const StreamCommand& command, uint64_t slot) const;

  UnaryClient& unary_;
  PrincipalPtr owner_;
  std::unique_ptr<StreamRunner> runner_;
  std::shared_ptr<CheckingSink> sink_;
};

}  // namespace cubed::fuzz
