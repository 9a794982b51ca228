#pragma once

// The state of one Upload or Download (Note [Bulk transfers], bulk_transfers.h), shared between
// its reactor (gRPC threads), the stream's BulkTransfers (loop thread) and backend completions;
// each is guarded by its own mutex.

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/ids.h"
#include "cubed/v1/session.pb.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"
#include "grpcpp/support/slice.h"
#include "server/service/status_conversion.h"
#include "server/service/stream/bulk_transfers.h"
#include "server/service/stream/upload_chunk_wire.h"

namespace cubed {

struct UploadState {
  absl::Mutex mu;
  grpc::ServerReadReactor<grpc::ByteBuffer>* reactor ABSL_GUARDED_BY(mu) = nullptr;  // Null: done.
  grpc::ByteBuffer* response = nullptr;  // A serialized UploadDone, set by FinishLocked.
  grpc::ByteBuffer reading;  // The read target; touched only while no read is in flight.
  bool attached = false;
  SessionId session;
  uint64_t seq = 0;
  uint64_t total = 0;  // As declared by the first chunk.
  // Note [Bulk lanes], as declared by the first chunk (lanes >= 1), and the bytes [begin, end)
  // this lane carries (UploadLaneRange; empty, with `error` set, when the lanes are bad).
  uint32_t lane = 0;
  uint32_t lanes = 1;
  uint64_t begin = 0;
  uint64_t end = 0;
  // Chunks received and not yet written, in order; the front one is being written while
  // `writing`. A chunk that could not be parsed is kept as its error, in its place.
  std::deque<absl::StatusOr<UploadPiece>> pieces ABSL_GUARDED_BY(mu);
  bool flowing ABSL_GUARDED_BY(mu) = false;  // Its command waits: read ahead up to the window.
  bool read_in_flight ABSL_GUARDED_BY(mu) = false;
  bool writing ABSL_GUARDED_BY(mu) = false;  // pieces.front() is being written.
  bool closed ABSL_GUARDED_BY(mu) = false;   // The client half-closed.
  bool cancelled ABSL_GUARDED_BY(mu) = false;
  bool complete ABSL_GUARDED_BY(mu) = false;  // Its command finished OK.
  uint64_t received ABSL_GUARDED_BY(mu) = 0;  // Bytes of this lane written.
  // A write failed, or the lane cannot be used (bad or disagreeing lanes): its command fails.
  absl::Status error ABSL_GUARDED_BY(mu);
  std::weak_ptr<BulkTransfers> owner ABSL_GUARDED_BY(mu);

  // Reads the next chunk when one may be read: the first one always; later ones only while its
  // command waits (`flowing`), with fewer than kUploadWindow chunks held, none of them bad.
  void StartReadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (reactor == nullptr || read_in_flight || closed || cancelled) return;
    if (attached && !flowing) return;
    if (pieces.size() >= kUploadWindow || (!pieces.empty() && !pieces.back().ok())) return;
    read_in_flight = true;
    reactor->StartRead(&reading);
  }
  void FinishLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (reactor == nullptr) return;
    if (status.ok()) {
      v1::UploadDone done;
      done.set_bytes(received);
      const std::string bytes = done.SerializeAsString();
      grpc::Slice slice(bytes);
      *response = grpc::ByteBuffer(&slice, 1);
    }
    reactor->Finish(ToGrpcStatus(status));
    reactor = nullptr;
    // The chunk being written stays until its write is done (its callback drops it).
    while (pieces.size() > (writing ? 1 : 0)) pieces.pop_back();
  }
};

// One download chunk read and not yet written: the serialized DownloadChunk without `data`
// (with field 4's tag and length when there is data), then the bytes themselves.
struct DownloadPiece {
  std::string header;
  std::unique_ptr<std::string> data;  // Null: a chunk with the sizes only.
};

// The wire form of `chunk` (no data) followed by the tag and length of `data_bytes` bytes as
// field 4 (the bytes themselves follow as their own slice). Pure.
std::string DownloadHeader(const v1::DownloadChunk& chunk, uint64_t data_bytes);

struct DownloadState {
  absl::Mutex mu;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* reactor ABSL_GUARDED_BY(mu) = nullptr;
  SessionId session;
  uint64_t seq = 0;
  uint64_t chunk_bytes = kMaxBulkChunk;
  uint32_t lane = 0;  // Note [Bulk lanes] (lanes >= 1).
  uint32_t lanes = 1;
  // Pieces given to this lane (by the loop thread, in StepDownload); the first carries the sizes.
  uint64_t issued = 0;
  // Pieces read and not yet written, by this lane's piece index; written in index order.
  std::map<uint64_t, DownloadPiece> ready ABSL_GUARDED_BY(mu);
  uint64_t next_write ABSL_GUARDED_BY(mu) = 0;
  // The chunk being written: its message (the data slice owns the piece's bytes until gRPC is
  // done with them) and its data bytes; `writing` while a write is in flight.
  grpc::ByteBuffer writing_msg ABSL_GUARDED_BY(mu);
  uint64_t writing_bytes ABSL_GUARDED_BY(mu) = 0;
  bool writing ABSL_GUARDED_BY(mu) = false;
  uint64_t outstanding ABSL_GUARDED_BY(mu) = 0;  // Issued pieces not yet written.
  uint64_t written ABSL_GUARDED_BY(mu) = 0;      // Bytes written.
  bool failed ABSL_GUARDED_BY(mu) = false;       // A write failed (the client is gone).
  bool cancelled ABSL_GUARDED_BY(mu) = false;
  // A piece read failed, or the lane cannot be used (bad or disagreeing lanes, chunk_bytes).
  absl::Status error ABSL_GUARDED_BY(mu);
  std::weak_ptr<BulkTransfers> owner ABSL_GUARDED_BY(mu);

  void MaybeWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (reactor == nullptr || writing) return;
    auto it = ready.find(next_write);
    if (it == ready.end()) return;
    DownloadPiece piece = std::move(it->second);
    ready.erase(it);
    ++next_write;
    writing = true;
    writing_bytes = 0;
    std::vector<grpc::Slice> slices;
    slices.emplace_back(piece.header);
    if (piece.data != nullptr && !piece.data->empty()) {
      std::string* data = piece.data.release();
      writing_bytes = data->size();
      slices.emplace_back(
          data->data(), data->size(), [](void* p) { delete static_cast<std::string*>(p); }, data);
    }
    writing_msg = grpc::ByteBuffer(slices.data(), slices.size());
    reactor->StartWrite(&writing_msg);
  }
  void FinishLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (reactor == nullptr) return;
    reactor->Finish(ToGrpcStatus(status));
    reactor = nullptr;
    ready.clear();
  }
};

}  // namespace cubed
