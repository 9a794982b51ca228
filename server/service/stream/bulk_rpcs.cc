// The Upload and Download RPCs of cubed.v1.SessionStream (Note [Bulk transfers],
// bulk_transfers.h): their reactors, and how a transfer finds its stream.

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/bulk_lanes.h"
#include "server/service/stream/bulk_transfer_state.h"
#include "server/service/stream/bulk_transfers.h"
#include "server/service/stream/session_stream.h"

namespace cubed {

namespace {

// A reactor's OnCancel (either direction): marks the transfer cancelled; the stream that owns it
// handles that at its next event (failing the waiting command); with no stream left, the
// transfer finishes CANCELLED at once.
template <typename State>
void CancelTransfer(State& state, const char* message) {
  std::shared_ptr<BulkTransfers> owner;
  {
    absl::MutexLock lock(&state.mu);
    state.cancelled = true;
    owner = state.owner.lock();
    if (owner == nullptr) {
      state.FinishLocked(absl::CancelledError(message));
      return;
    }
  }
  owner->Event(state.seq);
}

// Upload is a raw method: each chunk is parsed where gRPC received it (upload_chunk_wire.h).
class UploadReactor final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  UploadReactor(SessionStreamService* service, grpc::CallbackServerContext* ctx,
                PrincipalPtr caller, grpc::ByteBuffer* response)
      : service_(service),
        ctx_(ctx),
        caller_(std::move(caller)),
        state_(std::make_shared<UploadState>()) {
    state_->response = response;
    absl::MutexLock lock(&state_->mu);
    state_->reactor = this;
  }
  void Begin() {
    absl::MutexLock lock(&state_->mu);
    state_->StartReadLocked();
  }
  void FailAtOnce(const absl::Status& status) {
    absl::MutexLock lock(&state_->mu);
    state_->FinishLocked(status);
  }

  void OnReadDone(bool ok) override {
    // `reading` is this callback's alone until the next StartRead.
    absl::StatusOr<UploadPiece> piece;
    if (ok) {
      UploadPiece parsed;
      absl::Status status = ParseUploadChunk(state_->reading, &parsed);
      state_->reading.Clear();
      if (status.ok()) {
        piece = std::move(parsed);
      } else {
        piece = std::move(status);
      }
    }
    std::shared_ptr<BulkTransfers> owner;
    bool first = false;
    {
      absl::MutexLock lock(&state_->mu);
      state_->read_in_flight = false;
      if (ok) {
        state_->pieces.push_back(std::move(piece));
      } else if (ctx_->IsCancelled()) {  // A cancel, not the client's half-close.
        state_->cancelled = true;
      } else {
        state_->closed = true;
      }
      first = !state_->attached;
      if (first) {
        if (!ok) {
          state_->FinishLocked(absl::InvalidArgumentError(
              "the upload ended before its first chunk (session, seq, total_size, data)"));
          return;
        }
        const absl::StatusOr<UploadPiece>& head = state_->pieces.front();
        if (!head.ok()) {
          state_->FinishLocked(head.status());
          return;
        }
        state_->attached = true;
        state_->session = SessionId(head->session);
        state_->seq = head->seq;
        state_->total = head->total;
        // Bad lanes fail the create (the lane still joins its command, so that it can).
        state_->lane = head->lane;
        state_->lanes = std::max<uint32_t>(head->lanes, 1);
        absl::StatusOr<BulkLaneRange> range = UploadLaneRange(head->total, head->lanes, head->lane);
        if (range.ok()) {
          state_->begin = range->begin;
          state_->end = range->end;
        } else {
          state_->error = range.status();
        }
      } else {
        state_->StartReadLocked();  // Reads ahead while its command waits.
      }
      owner = state_->owner.lock();
    }
    if (first) {
      std::shared_ptr<BulkTransfers> bulk = service_->FindBulk(state_->session, caller_.get());
      if (bulk == nullptr) {
        FailAtOnce(absl::NotFoundError(absl::StrCat("session: ", state_->session.value(),
                                                    " has no open session stream on this daemon")));
        return;
      }
      {
        absl::MutexLock lock(&state_->mu);
        state_->owner = bulk;
      }
      bulk->AttachUpload(state_);
      return;
    }
    if (owner != nullptr) {
      owner->Event(state_->seq);
    } else {
      FailAtOnce(absl::UnavailableError("the session stream of this upload ended"));
    }
  }

  void OnCancel() override { CancelTransfer(*state_, "the client cancelled the upload"); }

  void OnDone() override { delete this; }

 private:
  SessionStreamService* const service_;
  grpc::CallbackServerContext* const ctx_;
  const PrincipalPtr caller_;
  std::shared_ptr<UploadState> state_;
};

class DownloadReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  DownloadReactor() : state_(std::make_shared<DownloadState>()) {
    absl::MutexLock lock(&state_->mu);
    state_->reactor = this;
  }
  const std::shared_ptr<DownloadState>& state() const { return state_; }
  void FailAtOnce(const absl::Status& status) {
    absl::MutexLock lock(&state_->mu);
    state_->FinishLocked(status);
  }

  void OnWriteDone(bool ok) override {
    std::shared_ptr<BulkTransfers> owner;
    {
      absl::MutexLock lock(&state_->mu);
      if (state_->writing) state_->written += state_->writing_bytes;
      state_->writing = false;
      state_->writing_msg.Clear();
      --state_->outstanding;
      if (ok) {
        state_->MaybeWriteLocked();
      } else {
        state_->failed = true;
      }
      owner = state_->owner.lock();
    }
    if (owner != nullptr) owner->Event(state_->seq);
  }

  void OnCancel() override { CancelTransfer(*state_, "the client cancelled the download"); }

  void OnDone() override { delete this; }

 private:
  std::shared_ptr<DownloadState> state_;
};

}  // namespace

void SessionStreamService::RegisterBulk(SessionId session, std::weak_ptr<BulkTransfers> bulk,
                                        PrincipalPtr owner) {
  absl::MutexLock lock(&mu_);
  bulk_[session] = BulkEntry{std::move(bulk), std::move(owner)};
}

void SessionStreamService::UnregisterBulk(SessionId session) {
  absl::MutexLock lock(&mu_);
  bulk_.erase(session);
}

std::shared_ptr<BulkTransfers> SessionStreamService::FindBulk(SessionId session,
                                                              const Principal* caller) const {
  absl::MutexLock lock(&mu_);
  auto it = bulk_.find(session);
  if (it == bulk_.end()) return nullptr;
  const Principal* owner = it->second.owner.get();
  // Another principal's session looks exactly like an unknown one.
  if (owner != caller && (owner == nullptr || caller == nullptr || owner->name != caller->name)) {
    return nullptr;
  }
  return it->second.bulk.lock();
}

grpc::ServerReadReactor<grpc::ByteBuffer>* SessionStreamService::Upload(
    grpc::CallbackServerContext* ctx, grpc::ByteBuffer* response) {
  absl::StatusOr<PrincipalPtr> principal =
      auth_ != nullptr ? auth_->Authorize(*ctx, "Create") : PrincipalPtr();
  auto* reactor =
      new UploadReactor(this, ctx, principal.ok() ? *principal : PrincipalPtr(), response);
  if (!principal.ok()) {
    reactor->FailAtOnce(principal.status());
  } else if (draining_.load(std::memory_order_acquire)) {
    reactor->FailAtOnce(absl::UnavailableError("the daemon is shutting down"));
  } else {
    reactor->Begin();
  }
  return reactor;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* SessionStreamService::Download(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* raw_request) {
  auto* reactor = new DownloadReactor();
  v1::DownloadRequest parsed;
  const v1::DownloadRequest* request = &parsed;
  {
    std::vector<grpc::Slice> slices;
    std::string bytes;
    if (raw_request->Dump(&slices).ok()) {
      for (const grpc::Slice& s : slices) {
        bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
      }
    }
    if (!parsed.ParseFromString(bytes)) {
      reactor->FailAtOnce(absl::InvalidArgumentError(
          "the DownloadRequest could not be parsed (not a cubed.v1.DownloadRequest)"));
      return reactor;
    }
  }
  absl::StatusOr<PrincipalPtr> principal =
      auth_ != nullptr ? auth_->Authorize(*ctx, "Read") : PrincipalPtr();
  if (!principal.ok()) {
    reactor->FailAtOnce(principal.status());
    return reactor;
  }
  if (draining_.load(std::memory_order_acquire)) {
    reactor->FailAtOnce(absl::UnavailableError("the daemon is shutting down"));
    return reactor;
  }
  // A bad chunk_bytes or lane fails the bulk read it names too (docs/api.md): the download is
  // joined with the error, and its command fails with it when it runs.
  absl::Status request_error;
  if (request->chunk_bytes() > kMaxBulkChunk) {
    request_error = absl::InvalidArgumentError(absl::StrCat("chunk_bytes: ", request->chunk_bytes(),
                                                            " is outside 1 .. ", kMaxBulkChunk,
                                                            " (0 = ", kMaxBulkChunk, ")"));
  }
  std::shared_ptr<BulkTransfers> bulk = FindBulk(SessionId(request->session()), principal->get());
  if (bulk == nullptr) {
    reactor->FailAtOnce(!request_error.ok() ? request_error
                                            : absl::NotFoundError(absl::StrCat(
                                                  "session: ", request->session(),
                                                  " has no open session stream on this daemon")));
    return reactor;
  }
  // Bad lanes fail the read the same way.
  if (request_error.ok() && request->lanes() > kMaxBulkLanes) {
    request_error = absl::InvalidArgumentError(absl::StrCat(
        "lanes: ", request->lanes(), " lanes; a bulk transfer has 1 .. ", kMaxBulkLanes));
  } else if (request_error.ok() && request->lane() >= std::max<uint32_t>(request->lanes(), 1)) {
    request_error = absl::InvalidArgumentError(absl::StrCat("lane: lane ", request->lane(), " of ",
                                                            std::max<uint32_t>(request->lanes(), 1),
                                                            " lanes (lanes count from 0)"));
  }
  const std::shared_ptr<DownloadState>& state = reactor->state();
  state->session = SessionId(request->session());
  state->seq = request->seq();
  state->chunk_bytes =
      request->chunk_bytes() == 0 || !request_error.ok() ? kMaxBulkChunk : request->chunk_bytes();
  state->lane = request->lane();
  state->lanes = std::max<uint32_t>(request->lanes(), 1);
  if (!request_error.ok()) {
    absl::MutexLock lock(&state->mu);
    state->error = request_error;
  }
  bulk->AttachDownload(state);
  return reactor;
}

}  // namespace cubed
