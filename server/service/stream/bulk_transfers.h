#pragma once

// Bulk transfers of the session stream: the Upload and Download RPCs of cubed.v1.SessionStream
// (proto/cubed/v1/session.proto) and the wait of a bulk command for them.
//
// Note [Bulk transfers]: a bulk create (create.bulk_size, create_tensor.bulk) or bulk read
// (read.bulk, read_tensor.bulk) is joined to its transfer by (session, seq). When the stream's
// runner reaches such a command it allocates (create) or checks the bindings (read) in command
// order, then the stream WAITS at that command: it runs nothing else until the transfer moved
// every byte, but the device's loop does not: each step of a transfer (one chunk written into
// the allocation with ComputeServer::Write, or one piece read with Device::ReadPiece) is its own
// loop task, so other streams and unary calls are served between chunks, and while a transfer
// waits for the network nothing of it runs at all. An Upload that arrives before its command ran
// is attached but not read further (at most one chunk of it is held); a Download that arrives
// early just waits. While its command waits an upload is read ahead: gRPC receives the next
// chunks while the loop writes the first, so that the network and the copy overlap. Memory per
// transfer: at most kUploadWindow upload chunks (received, or being written), or at most
// kDownloadWindow download chunks (being read from the device or written), each <= 4 MiB. Upload
// is a raw method: a chunk is parsed where gRPC received it (ParseUploadChunk,
// upload_chunk_wire.h) and its bytes gathered from gRPC's slices straight into the allocation or
// the backend's staging buffer (one copy). A download chunk is written as a raw
// grpc::ByteBuffer: a small serialized DownloadChunk header plus one slice that owns the piece's
// bytes (no serialization copy); gRPC frees the bytes once it has sent them.
//
// Failure. A transfer that fails (bad chunk, total mismatch, cancelled, write failed) fails its
// command with that error (StreamRunner::FinishBulk: a create releases its allocation and
// poisons its id; a read answers with the error), and the stream goes on. A command that fails
// before its transfer came (bad id, allocation refused, bad binding) is remembered (the last
// kMaxRememberedFailures) so that its transfer, arriving later, ends with the same error. A
// transfer whose seq the stream passed without a bulk command ends FAILED_PRECONDITION. When the
// stream ends (half-close with nothing left, cancel, error, lease, shutdown) every transfer ends
// with the stream's status and the session's close frees whatever the waiting command allocated.
// While a command waits, the session's lease is renewed by every chunk; a command that waits for
// a transfer that never comes holds the stream (nothing else of the daemon) until the client
// ends it or the daemon shuts down; if the lease passes meanwhile the daemon closes the session
// (freeing its memory) and the stream ends NOT_FOUND at its next step.
//
// Note [Bulk lanes]: one connection carries a transfer at the speed of gRPC's per-byte work on
// one thread at each end (HTTP/2 framing, copies into and out of its buffers), well below what
// the socket itself moves (docs/benchmarks.md, P3). So the bytes of one bulk command may come on
// up to kMaxBulkLanes transfers at once, each an Upload or Download of its own on a connection of
// its own (the client opens them; session.proto: UploadChunk.lane, DownloadRequest.lane). The
// transfers of one command are its lanes, keyed (seq, lane); the command waits until every lane
// came and finished. An upload's lanes carry fixed ranges (UploadLaneRange, common/bulk_lanes.h:
// both ends compute them), each written as its chunks come, one write in flight per lane. A
// download's pieces are dealt to whichever lane has room (kDownloadWindow each), so a slow
// connection takes fewer; every lane's first chunk carries the sizes. Lanes that disagree
// (lanes, total_size, chunk_bytes) or name a bad lane fail the command, and every lane ends with
// its error; a command's failure is remembered, so that lanes still to come end with it too.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/channel/bulk_read_plan.h"
#include "server/channel/device.h"
#include "server/channel/stream_command.h"
#include "server/channel/stream_reply.h"
#include "server/channel/stream_runner.h"

namespace cubed {

// Chunk bounds of Upload and Download (bytes).
inline constexpr uint64_t kMaxBulkChunk = uint64_t{4} << 20;
// Upload chunks received and not yet written per transfer, while its command waits: gRPC reads
// the next chunks while the loop writes the first (Note [Bulk transfers]).
inline constexpr uint64_t kUploadWindow = 4;
// Download pieces in flight per transfer (being read from the device, or read and not yet
// written to the client): the daemon holds at most this many chunks of a download.
inline constexpr uint64_t kDownloadWindow = 4;

struct UploadState;
struct DownloadState;

// The bulk transfers of one stream. Thread-safe. The stream calls Start/Step/Passed on the loop
// thread; the Upload/Download reactors attach from gRPC threads. `kick` asks the stream to run
// Step on the loop soon; it is called without this object's lock held.
class BulkTransfers : public std::enable_shared_from_this<BulkTransfers> {
 public:
  static constexpr size_t kMaxRememberedFailures = 1024;

  explicit BulkTransfers(absl::AnyInvocable<void()> kick);
  ~BulkTransfers();

  // Loop thread: runs bulk `command` up to its wait (StreamRunner::StartBulk). Returns true when
  // the stream now waits at it (the command is moved in); false when it already failed.
  bool Start(Device& device, StreamRunner& runner, StreamCommand& command, ReplySink& sink);
  // Whether the stream waits at a bulk command, and whether Step has something to do.
  bool waiting() const;
  bool ready() const;
  // Loop thread: advances the waited transfer; returns true when the command finished (the
  // stream goes on).
  bool Step(Device& device, StreamRunner& runner, ReplySink& sink);
  // Loop thread: command `seq` (not bulk) ran; transfers for it or earlier seqs end.
  void Passed(uint64_t seq);
  // Ends every transfer with `status` and forgets the wait (the stream ends). Idempotent.
  void EndAll(const absl::Status& status);

  // gRPC threads: a new Upload/Download for `seq` (first chunk read / request received).
  void AttachUpload(const std::shared_ptr<UploadState>& upload);
  void AttachDownload(const std::shared_ptr<DownloadState>& download);
  // gRPC/backend threads: something happened on a transfer (read, write, cancel).
  void Event(uint64_t seq);

 private:
  struct Wait;
  struct Direction;
  // (seq, lane): the lanes of one command lie together, in lane order.
  using LaneKey = std::pair<uint64_t, uint32_t>;
  template <typename State>
  using TransferMap = std::map<LaneKey, std::shared_ptr<State>>;
  // AttachUpload / AttachDownload: refuses a transfer that cannot be joined (stream ended, seq
  // failed, duplicate lane, wrong direction, seq already ran) by finishing it, else records it
  // (with an error when it disagrees with its command's other lanes) and kicks the stream when
  // it waits for it.
  template <typename State>
  void Attach(TransferMap<State> BulkTransfers::*member, const std::shared_ptr<State>& state,
              const Direction& direction);
  // Finishes every lane of `seq` in `transfers` with `status` and forgets them.
  template <typename State>
  void EndLanesLocked(TransferMap<State>& transfers, uint64_t seq, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RememberFailureLocked(uint64_t seq, absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Loop thread: last_seq_ = max(last_seq_, seq).
  void RaiseLastSeq(uint64_t seq);
  // Ends the transfers of seqs <= `seq` that no command will join: FAILED_PRECONDITION, except
  // uploads that brought their command's bytes and wait for the client's half-close.
  void EndUnjoinedLocked(uint64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Settles transfers not being waited on: late cancels are remembered; an upload that finished
  // its command ends once the client half-closed.
  void SettleLocked(uint64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool StepUpload(Device& device, StreamRunner& runner, ReplySink& sink);
  bool StepDownload(Device& device, StreamRunner& runner, ReplySink& sink);
  // Ends the wait with `status` (FinishBulk) and ends its lanes with the recorded error.
  void EndWait(Device& device, StreamRunner& runner, ReplySink& sink, const absl::Status& status);

  absl::AnyInvocable<void()> kick_;
  mutable absl::Mutex mu_;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status end_status_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Wait> wait_ ABSL_GUARDED_BY(mu_);
  bool kicked_ ABSL_GUARDED_BY(mu_) = false;
  // Of the last command run (bulk or not). Written on the loop thread only (Start, Passed), so a
  // command that no transfer waits for updates it without mu_ (a lock a command was ~9% of the
  // CPU backend's loop per tiny execute); Attach reads it under mu_.
  std::atomic<uint64_t> last_seq_{0};
  // uploads_.size() + downloads_.size(), and 1 more while Attach decides (Passed reads it
  // without mu_).
  std::atomic<size_t> attached_{0};
  TransferMap<UploadState> uploads_ ABSL_GUARDED_BY(mu_);
  TransferMap<DownloadState> downloads_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, absl::Status> failed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cubed
