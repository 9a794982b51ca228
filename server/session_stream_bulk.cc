#include "server/session_stream_bulk.h"

#include <algorithm>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/checked_math.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"
#include "grpcpp/support/slice.h"
#include "server/session_stream.h"
#include "common/status_macros.h"
#include "server/status_conversion.h"

namespace cubed {

// ---------------------------------------------------------------------------------------------
// BulkReadPlan

absl::StatusOr<std::unique_ptr<BulkReadPlan>> BulkReadPlan::Make(std::vector<TensorRef> tensors,
                                                                  uint64_t chunk) {
  std::vector<uint64_t> sizes;
  sizes.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorRef& t = tensors[i];
    ASSIGN_OR_RETURN(const uint64_t bytes,
                     TensorBytes(t.shape, t.elem_size, absl::StrCat("bindings[", i, "]")));
    sizes.push_back(bytes);
  }
  return std::unique_ptr<BulkReadPlan>(
      new BulkReadPlan(std::move(tensors), std::move(sizes), chunk));
}

BulkReadPlan::BulkReadPlan(std::vector<TensorRef> tensors, std::vector<uint64_t> sizes,
                           uint64_t chunk)
    : tensors_(std::move(tensors)), chunk_(std::max<uint64_t>(chunk, 1)), sizes_(std::move(sizes)) {
  StartTensor();
}

void BulkReadPlan::StartTensor() {
  while (t_ < tensors_.size() && sizes_[t_] == 0) ++t_;
  if (t_ >= tensors_.size()) return;
  const TensorRef& t = tensors_[t_];
  const size_t rank = t.shape.size();
  // The outermost dimension whose one index (every inner dimension whole) fits a chunk. No
  // dimension is 0 (sizes_[t_] > 0), so each division is exact.
  uint64_t slab = sizes_[t_];
  d_ = rank - 1;
  for (size_t d = 0; d < rank; ++d) {
    slab /= t.shape[d];  // Bytes of one index of dimension d.
    if (slab <= chunk_) {
      d_ = d;
      break;
    }
  }
  slab_ = slab;
  k_ = std::max<uint64_t>(1, chunk_ / std::max<uint64_t>(slab, 1));
  idx_.assign(d_ + 1, 0);
  offset_ = 0;
}

BulkPiece BulkReadPlan::Next() {
  const TensorRef& t = tensors_[t_];
  BulkPiece p;
  p.binding = static_cast<uint32_t>(t_);
  p.offset = offset_;
  const uint64_t count = std::min(k_, t.shape[d_] - idx_[d_]);
  uint64_t first = 0;  // Elements from the binding's start to the piece's first element.
  for (size_t d = 0; d <= d_; ++d) first += idx_[d] * t.strides[d];
  p.ref = t;
  p.ref.binding.offset_start += first * t.elem_size;
  for (size_t d = 0; d < d_; ++d) p.ref.shape[d] = 1;
  p.ref.shape[d_] = count;
  p.bytes = count * slab_;  // <= sizes_[t_]: count indices of d_, inner dimensions whole.
  offset_ += p.bytes;
  // Advance: along d_, then the outer dimensions odometer style.
  idx_[d_] += count;
  if (idx_[d_] == t.shape[d_]) {
    idx_[d_] = 0;
    size_t d = d_;
    bool carry = true;
    while (carry && d-- > 0) {
      carry = ++idx_[d] == t.shape[d];
      if (carry) idx_[d] = 0;
    }
    if (carry) {  // This tensor is done.
      ++t_;
      StartTensor();
    }
  }
  return p;
}

// ---------------------------------------------------------------------------------------------
// Transfer states, shared between a reactor (gRPC threads), BulkTransfers and completions.

struct UploadState {
  absl::Mutex mu;
  grpc::ServerReadReactor<v1::UploadChunk>* reactor ABSL_GUARDED_BY(mu) = nullptr;  // Null: done.
  v1::UploadDone* response = nullptr;
  v1::UploadChunk chunk;  // The read target; touched by one side at a time (flags below).
  bool attached = false;
  uint64_t session = 0;
  uint64_t seq = 0;
  uint64_t total = 0;  // As declared by the first chunk.
  bool read_in_flight ABSL_GUARDED_BY(mu) = false;
  bool chunk_ready ABSL_GUARDED_BY(mu) = false;  // `chunk` holds bytes not yet written.
  bool writing ABSL_GUARDED_BY(mu) = false;      // `chunk` is being written.
  bool closed ABSL_GUARDED_BY(mu) = false;       // The client half-closed.
  bool cancelled ABSL_GUARDED_BY(mu) = false;
  bool complete ABSL_GUARDED_BY(mu) = false;     // Its command finished OK.
  uint64_t received ABSL_GUARDED_BY(mu) = 0;     // Bytes written.
  absl::Status error ABSL_GUARDED_BY(mu);        // A write failed.
  std::weak_ptr<BulkTransfers> owner ABSL_GUARDED_BY(mu);

  void StartReadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (reactor == nullptr || read_in_flight || chunk_ready || writing || closed || cancelled) {
      return;
    }
    read_in_flight = true;
    reactor->StartRead(&chunk);
  }
  void FinishLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (reactor == nullptr) return;
    if (status.ok()) response->set_bytes(received);
    reactor->Finish(ToGrpcStatus(status));
    reactor = nullptr;
  }
};

namespace {

// One download chunk read and not yet written: the serialized DownloadChunk without `data`
// (with field 4's tag and length when there is data), then the bytes themselves.
struct DownloadPiece {
  std::string header;
  std::unique_ptr<std::string> data;  // Null: a chunk with the sizes only.
};

// The wire form of `chunk` (no data) followed by `data` bytes as field 4.
std::string DownloadHeader(const v1::DownloadChunk& chunk, uint64_t data_bytes) {
  std::string header = chunk.SerializeAsString();
  if (data_bytes == 0) return header;
  header.push_back(static_cast<char>((4 << 3) | 2));  // Field 4 (data), length-delimited.
  for (uint64_t v = data_bytes; ; v >>= 7) {
    if (v < 0x80) {
      header.push_back(static_cast<char>(v));
      break;
    }
    header.push_back(static_cast<char>((v & 0x7F) | 0x80));
  }
  return header;
}

}  // namespace

struct DownloadState {
  absl::Mutex mu;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* reactor ABSL_GUARDED_BY(mu) = nullptr;
  uint64_t session = 0;
  uint64_t seq = 0;
  uint64_t chunk_bytes = kMaxBulkChunk;
  // Pieces read and not yet written, by piece index; written in index order.
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
  absl::Status error ABSL_GUARDED_BY(mu);        // A piece read failed.
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

class UploadReactor final : public grpc::ServerReadReactor<v1::UploadChunk> {
 public:
  UploadReactor(SessionStreamService* service, grpc::CallbackServerContext* ctx,
                PrincipalPtr caller, v1::UploadDone* response)
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
    state_->read_in_flight = true;
    StartRead(&state_->chunk);
  }
  void FailAtOnce(const absl::Status& status) {
    absl::MutexLock lock(&state_->mu);
    state_->FinishLocked(status);
  }

  void OnReadDone(bool ok) override {
    std::shared_ptr<BulkTransfers> owner;
    bool first = false;
    {
      absl::MutexLock lock(&state_->mu);
      state_->read_in_flight = false;
      if (ok) {
        state_->chunk_ready = true;
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
        state_->attached = true;
        state_->session = state_->chunk.session();
        state_->seq = state_->chunk.seq();
        state_->total = state_->chunk.total_size();
      }
      owner = state_->owner.lock();
    }
    if (first) {
      std::shared_ptr<BulkTransfers> bulk = service_->FindBulk(state_->session, caller_.get());
      if (bulk == nullptr) {
        FailAtOnce(absl::NotFoundError(absl::StrCat(
            "session: ", state_->session, " has no open session stream on this daemon")));
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

absl::Status EndedStatus(const absl::Status& end, uint64_t seq) {
  if (!end.ok()) return end;
  return absl::FailedPreconditionError(absl::StrCat(
      "seq: the session stream ended without running bulk command ", seq));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// BulkTransfers

struct BulkTransfers::Wait {
  StreamCommand command;
  bool upload = false;
  uint64_t total = 0;                  // Upload: the bytes it must bring.
  std::unique_ptr<BulkReadPlan> plan;  // Download: once its transfer attached.
  uint64_t pieces = 0;                 // Download: pieces issued.
};

BulkTransfers::BulkTransfers(absl::AnyInvocable<void()> kick) : kick_(std::move(kick)) {}

BulkTransfers::~BulkTransfers() = default;

bool BulkTransfers::waiting() const {
  absl::MutexLock lock(&mu_);
  return wait_ != nullptr && !ended_;
}

bool BulkTransfers::ready() const {
  absl::MutexLock lock(&mu_);
  return wait_ != nullptr && !ended_ && kicked_;
}

void BulkTransfers::RememberFailureLocked(uint64_t seq, absl::Status status) {
  failed_.insert_or_assign(seq, std::move(status));
  while (failed_.size() > kMaxRememberedFailures) failed_.erase(failed_.begin());
}

bool BulkTransfers::Start(Device& device, StreamRunner& runner, StreamCommand& command,
                          ReplySink& sink) {
  const absl::Status status = runner.StartBulk(device, command, sink);
  const uint64_t seq = command.seq;
  absl::MutexLock lock(&mu_);
  last_seq_ = std::max(last_seq_, seq);
  // Transfers of earlier seqs will never be joined.
  if (seq > 0) EndUnjoinedLocked(seq - 1);
  if (!status.ok()) {
    auto end_it = [&](auto& transfers) {
      auto it = transfers.find(seq);
      if (it == transfers.end()) return false;
      absl::MutexLock tl(&it->second->mu);
      it->second->FinishLocked(status);
      transfers.erase(it);
      --attached_;
      return true;
    };
    if (!end_it(uploads_) && !end_it(downloads_)) RememberFailureLocked(seq, status);
    return false;
  }
  wait_ = std::make_unique<Wait>();
  wait_->upload = IsBulkCreate(command);
  wait_->total = command.size;
  wait_->command = std::move(command);
  kicked_ = true;  // Its transfer may be here already.
  // A transfer of the wrong direction attached early fails now.
  if (wait_->upload) {
    if (auto it = downloads_.find(seq); it != downloads_.end()) {
      absl::MutexLock tl(&it->second->mu);
      it->second->FinishLocked(absl::FailedPreconditionError(absl::StrCat(
          "seq: command ", seq, " is a bulk create; its bytes come through Upload")));
      downloads_.erase(it);
      --attached_;
    }
  } else if (auto it = uploads_.find(seq); it != uploads_.end()) {
    absl::MutexLock tl(&it->second->mu);
    it->second->FinishLocked(absl::FailedPreconditionError(
        absl::StrCat("seq: command ", seq, " is a bulk read; its bytes come through Download")));
    uploads_.erase(it);
    --attached_;
  }
  return true;
}

void BulkTransfers::Passed(uint64_t seq) {
  if (attached_.load() == 0) {
    absl::MutexLock lock(&mu_);
    last_seq_ = std::max(last_seq_, seq);
    return;
  }
  absl::MutexLock lock(&mu_);
  last_seq_ = std::max(last_seq_, seq);
  EndUnjoinedLocked(seq);
}

void BulkTransfers::EndUnjoinedLocked(uint64_t seq) {
  auto end_upto = [&](auto& transfers) {
    for (auto it = transfers.begin(); it != transfers.end() && it->first <= seq;) {
      {
        absl::MutexLock tl(&it->second->mu);
        if constexpr (std::is_same_v<std::decay_t<decltype(*it->second)>, UploadState>) {
          // It brought its command's bytes; it ends once the client half-closes (SettleLocked).
          if (it->second->complete) {
            ++it;
            continue;
          }
        }
        it->second->FinishLocked(absl::FailedPreconditionError(
            absl::StrCat("seq: command ", it->first, " is not a bulk command of this stream")));
      }
      it = transfers.erase(it);
      --attached_;
    }
  };
  end_upto(uploads_);
  end_upto(downloads_);
}

// What differs between the two directions in Attach's errors.
struct BulkTransfers::Direction {
  bool upload;
  const char* one;         // "an upload"
  const char* wrong_kind;  // Said when the waited command is of the other direction.
  const char* not_kind;    // Said when the seq already ran or is not bulk.
};

template <typename State>
void BulkTransfers::Attach(std::map<uint64_t, std::shared_ptr<State>>& transfers,
                           const std::shared_ptr<State>& state, const Direction& direction) {
  const uint64_t seq = state->seq;
  bool kick = false;
  {
    absl::MutexLock lock(&mu_);
    const bool waited = wait_ != nullptr && wait_->command.seq == seq;
    absl::Status reject;
    if (ended_) {
      reject = EndedStatus(end_status_, seq);
    } else if (auto f = failed_.find(seq); f != failed_.end()) {
      reject = f->second;
      failed_.erase(f);
    } else if (transfers.count(seq) != 0) {
      reject = absl::FailedPreconditionError(
          absl::StrCat("seq: command ", seq, " already has ", direction.one));
    } else if (waited && wait_->upload != direction.upload) {
      reject = absl::FailedPreconditionError(
          absl::StrCat("seq: command ", seq, direction.wrong_kind));
    } else if (!waited && seq <= last_seq_) {
      reject = absl::FailedPreconditionError(
          absl::StrCat("seq: command ", seq, direction.not_kind));
    }
    if (!reject.ok()) {
      absl::MutexLock tl(&state->mu);
      state->FinishLocked(reject);
      return;
    }
    {
      absl::MutexLock tl(&state->mu);
      state->owner = weak_from_this();  // An upload's reactor already set it (FindBulk).
    }
    transfers.emplace(seq, state);
    ++attached_;
    if (waited) {
      kicked_ = true;
      kick = true;
    }
  }
  if (kick) kick_();
}

void BulkTransfers::AttachUpload(const std::shared_ptr<UploadState>& upload) {
  static constexpr Direction kUpload = {
      true, "an upload", " is a bulk read; its bytes come through Download",
      " already ran, or is not a bulk create (duplicate upload?)"};
  Attach(uploads_, upload, kUpload);
}

void BulkTransfers::AttachDownload(const std::shared_ptr<DownloadState>& download) {
  static constexpr Direction kDownload = {
      false, "a download", " is a bulk create; its bytes come through Upload",
      " already ran, or is not a bulk read (duplicate download?)"};
  Attach(downloads_, download, kDownload);
}

void BulkTransfers::Event(uint64_t seq) {
  bool kick = false;
  {
    absl::MutexLock lock(&mu_);
    if (ended_) return;
    if (wait_ != nullptr && wait_->command.seq == seq) {
      kicked_ = true;
      kick = true;
    } else {
      SettleLocked(seq);
    }
  }
  if (kick) kick_();
}

void BulkTransfers::SettleLocked(uint64_t seq) {
  if (auto it = uploads_.find(seq); it != uploads_.end()) {
    UploadState& u = *it->second;
    absl::MutexLock tl(&u.mu);
    bool done = true;
    if (u.complete) {
      if (u.chunk_ready) {
        u.FinishLocked(absl::InvalidArgumentError(absl::StrCat(
            "data: a chunk at offset ", u.chunk.offset(), " after all ", u.total,
            " bytes (total_size) arrived; the create itself succeeded")));
      } else if (u.closed) {
        u.FinishLocked(absl::OkStatus());
      } else if (u.cancelled) {
        u.FinishLocked(absl::CancelledError("the client cancelled the upload after its end"));
      } else {
        done = false;
      }
    } else if (u.cancelled) {
      const absl::Status s = absl::CancelledError(absl::StrCat(
          "the client cancelled the upload for command ", seq, " before the command ran"));
      RememberFailureLocked(seq, s);
      u.FinishLocked(s);
    } else {
      done = false;
    }
    if (done) {
      uploads_.erase(it);
      --attached_;
    }
    return;
  }
  if (auto it = downloads_.find(seq); it != downloads_.end()) {
    DownloadState& d = *it->second;
    absl::MutexLock tl(&d.mu);
    if (d.cancelled || d.failed) {
      const absl::Status s = absl::CancelledError(absl::StrCat(
          "the client cancelled the download for command ", seq, " before the command ran"));
      RememberFailureLocked(seq, s);
      d.FinishLocked(s);
      downloads_.erase(it);
      --attached_;
    }
  }
}

void BulkTransfers::EndAll(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (ended_) return;
  ended_ = true;
  end_status_ = status;
  for (auto& [seq, u] : uploads_) {
    absl::MutexLock tl(&u->mu);
    if (u->complete && status.ok()) {
      u->FinishLocked(absl::OkStatus());
    } else {
      u->FinishLocked(EndedStatus(status, seq));
    }
  }
  for (auto& [seq, d] : downloads_) {
    absl::MutexLock tl(&d->mu);
    d->FinishLocked(EndedStatus(status, seq));
  }
  uploads_.clear();
  downloads_.clear();
  attached_ = 0;
}

bool BulkTransfers::Step(Device& device, StreamRunner& runner, ReplySink& sink) {
  bool upload = false;
  {
    absl::MutexLock lock(&mu_);
    kicked_ = false;
    if (ended_) return false;
    if (wait_ == nullptr) return true;
    upload = wait_->upload;
  }
  return upload ? StepUpload(device, runner, sink) : StepDownload(device, runner, sink);
}

void BulkTransfers::EndWait(Device& device, StreamRunner& runner, ReplySink& sink,
                            const absl::Status& status) {
  std::unique_ptr<Wait> wait;
  {
    absl::MutexLock lock(&mu_);
    wait = std::move(wait_);
  }
  const uint64_t seq = wait->command.seq;
  const absl::Status recorded = runner.FinishBulk(device, wait->command, status, sink);
  absl::MutexLock lock(&mu_);
  if (ended_) return;
  if (wait->upload) {
    auto it = uploads_.find(seq);
    if (it == uploads_.end()) return;
    {
      absl::MutexLock tl(&it->second->mu);
      if (status.ok()) {
        it->second->complete = true;
      } else {
        it->second->FinishLocked(recorded);
      }
    }
    if (!status.ok()) {
      uploads_.erase(it);
      --attached_;
    } else {
      SettleLocked(seq);
    }
    return;
  }
  auto it = downloads_.find(seq);
  if (it == downloads_.end()) return;
  {
    absl::MutexLock tl(&it->second->mu);
    it->second->FinishLocked(recorded);
  }
  downloads_.erase(it);
  --attached_;
}

bool BulkTransfers::StepUpload(Device& device, StreamRunner& runner, ReplySink& sink) {
  std::shared_ptr<UploadState> u;
  uint64_t total = 0;
  const StreamCommand* command = nullptr;
  {
    absl::MutexLock lock(&mu_);
    auto it = uploads_.find(wait_->command.seq);
    if (it == uploads_.end()) return false;
    u = it->second;
    total = wait_->total;
    command = &wait_->command;  // Stable: only this thread ends the wait.
  }
  absl::Status error;
  absl::Span<const uint8_t> bytes;
  uint64_t offset = 0;
  {
    absl::MutexLock tl(&u->mu);
    if (u->writing) return false;
    const uint64_t seq = command->seq;
    if (!u->error.ok()) {
      error = u->error;
    } else if (u->received == total) {
      // Every byte is in: the command is done (Wait below).
    } else if (u->cancelled) {
      error = absl::CancelledError(absl::StrCat("the client cancelled the upload after ",
                                                u->received, " of ", total, " bytes"));
    } else if (u->total != total) {
      error = absl::InvalidArgumentError(
          absl::StrCat("total_size: the upload declares ", u->total, " bytes but command ", seq,
                       " (", KindName(command->kind), ") needs ", total));
    } else if (u->chunk_ready) {
      const std::string& data = u->chunk.data();
      if (data.empty() || data.size() > kMaxBulkChunk) {
        error = absl::InvalidArgumentError(
            absl::StrCat("data: a chunk of ", data.size(), " bytes at offset ", u->chunk.offset(),
                         "; chunks are 1 .. ", kMaxBulkChunk, " bytes"));
      } else if (u->chunk.offset() != u->received) {
        error = absl::InvalidArgumentError(absl::StrCat(
            "offset: a chunk at offset ", u->chunk.offset(), " but ", u->received,
            " bytes came before it; chunks come in order, without gaps"));
      } else if (data.size() > total - u->received) {
        error = absl::InvalidArgumentError(
            absl::StrCat("data: the chunk [", u->chunk.offset(), ", +", data.size(),
                         ") goes past total_size ", total));
      } else {
        u->writing = true;
        bytes = absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(data.data()), data.size());
        offset = u->received;
      }
    } else if (u->closed) {
      error = absl::InvalidArgumentError(absl::StrCat(
          "total_size: the upload ended after ", u->received, " of ", total, " bytes"));
    } else {
      return false;  // Waiting for the next chunk.
    }
  }
  if (bytes.empty()) {
    EndWait(device, runner, sink, error);
    return true;
  }
  const uint64_t seq = command->seq;
  std::weak_ptr<BulkTransfers> self = weak_from_this();
  device.WritePiece(runner.session(), command->id, command->shape, command->strides,
                    command->elem_size, offset, bytes, absl::Now(),
                    [self, u, seq, n = bytes.size()](absl::Status s) {
                      {
                        absl::MutexLock tl(&u->mu);
                        u->writing = false;
                        u->chunk_ready = false;
                        u->chunk.clear_data();
                        if (s.ok()) {
                          u->received += n;
                        } else if (u->error.ok()) {
                          u->error = std::move(s);
                        }
                        u->StartReadLocked();  // Also after the last byte: to see the end.
                      }
                      if (auto owner = self.lock()) owner->Event(seq);
                    });
  return false;
}

bool BulkTransfers::StepDownload(Device& device, StreamRunner& runner, ReplySink& sink) {
  std::shared_ptr<DownloadState> d;
  std::vector<std::pair<uint64_t, BulkPiece>> issue;
  std::vector<uint64_t> sizes;
  absl::Status error;
  bool finished = false;
  uint64_t seq = 0;
  {
    absl::MutexLock lock(&mu_);
    seq = wait_->command.seq;
    auto it = downloads_.find(seq);
    if (it == downloads_.end()) return false;
    d = it->second;
    absl::MutexLock tl(&d->mu);
    if (wait_->plan == nullptr) {
      absl::StatusOr<std::unique_ptr<BulkReadPlan>> plan =
          BulkReadPlan::Make(wait_->command.read_tensor, d->chunk_bytes);
      if (plan.ok()) {
        wait_->plan = *std::move(plan);
      } else if (d->error.ok()) {
        d->error = plan.status();
      }
    }
    if (!d->error.ok()) {
      error = d->error;
    } else if (d->cancelled || d->failed) {
      error = absl::CancelledError(
          absl::StrCat("the client cancelled the download after ", d->written, " bytes"));
    } else if (BulkReadPlan& plan = *wait_->plan; plan.done() && wait_->pieces == 0) {
      // Nothing to read: one chunk with the sizes only.
      v1::DownloadChunk msg;
      for (uint64_t s : plan.sizes()) msg.add_sizes(s);
      d->ready.emplace(wait_->pieces++, DownloadPiece{DownloadHeader(msg, 0), nullptr});
      ++d->outstanding;
      d->MaybeWriteLocked();
    } else if (plan.done() && d->outstanding == 0) {
      finished = true;
    } else {
      while (!plan.done() && d->outstanding < kDownloadWindow) {
        issue.emplace_back(wait_->pieces++, plan.Next());
        ++d->outstanding;
      }
      if (!issue.empty() && issue.front().first == 0) sizes = plan.sizes();
    }
  }
  if (!error.ok() || finished) {
    EndWait(device, runner, sink, error);
    return true;
  }
  std::weak_ptr<BulkTransfers> self = weak_from_this();
  for (auto& [index, piece] : issue) {
    v1::DownloadChunk msg;
    if (index == 0) {
      for (uint64_t s : sizes) msg.add_sizes(s);
    }
    msg.set_binding(piece.binding);
    msg.set_offset(piece.offset);
    DownloadPiece ready{DownloadHeader(msg, piece.bytes), std::make_unique<std::string>()};
    std::string* out = ready.data.get();
    device.ReadPiece(runner.session(), piece.ref, out, absl::Now(),
                     [self, d, seq, index = index, ready = std::move(ready),
                      bytes = piece.bytes](absl::Status s) mutable {
                       {
                         absl::MutexLock tl(&d->mu);
                         if (s.ok() && ready.data->size() != bytes) {
                           s = absl::InternalError(absl::StrCat(
                               "a bulk read piece of ", bytes, " bytes read ",
                               ready.data->size()));
                         }
                         if (s.ok()) {
                           d->ready.emplace(index, std::move(ready));
                           d->MaybeWriteLocked();
                         } else {
                           --d->outstanding;
                           if (d->error.ok()) d->error = std::move(s);
                         }
                       }
                       if (auto owner = self.lock()) owner->Event(seq);
                     });
  }
  return false;
}

// ---------------------------------------------------------------------------------------------
// The service's two RPCs.

void SessionStreamService::RegisterBulk(uint64_t session, std::weak_ptr<BulkTransfers> bulk,
                                        PrincipalPtr owner) {
  absl::MutexLock lock(&mu_);
  bulk_[session] = BulkEntry{std::move(bulk), std::move(owner)};
}

void SessionStreamService::UnregisterBulk(uint64_t session) {
  absl::MutexLock lock(&mu_);
  bulk_.erase(session);
}

std::shared_ptr<BulkTransfers> SessionStreamService::FindBulk(uint64_t session,
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

grpc::ServerReadReactor<v1::UploadChunk>* SessionStreamService::Upload(
    grpc::CallbackServerContext* ctx, v1::UploadDone* response) {
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
  // A bad chunk_bytes fails the bulk read it names too (docs/api.md): the download is joined
  // with the error, and its command fails with it when it runs.
  absl::Status chunk_error;
  if (request->chunk_bytes() > kMaxBulkChunk) {
    chunk_error = absl::InvalidArgumentError(
        absl::StrCat("chunk_bytes: ", request->chunk_bytes(), " is outside 1 .. ", kMaxBulkChunk,
                     " (0 = ", kMaxBulkChunk, ")"));
  }
  std::shared_ptr<BulkTransfers> bulk = FindBulk(request->session(), principal->get());
  if (bulk == nullptr) {
    reactor->FailAtOnce(!chunk_error.ok()
                            ? chunk_error
                            : absl::NotFoundError(absl::StrCat(
                                  "session: ", request->session(),
                                  " has no open session stream on this daemon")));
    return reactor;
  }
  const std::shared_ptr<DownloadState>& state = reactor->state();
  state->session = request->session();
  state->seq = request->seq();
  state->chunk_bytes = request->chunk_bytes() == 0 || !chunk_error.ok() ? kMaxBulkChunk
                                                                         : request->chunk_bytes();
  if (!chunk_error.ok()) {
    absl::MutexLock lock(&state->mu);
    state->error = chunk_error;
  }
  bulk->AttachDownload(state);
  return reactor;
}

}  // namespace cubed
