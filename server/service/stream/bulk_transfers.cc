#include "server/service/stream/bulk_transfers.h"

#include <algorithm>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/service/stream/bulk_transfer_state.h"

namespace cubed {
namespace {

absl::Status EndedStatus(const absl::Status& end, uint64_t seq) {
  if (!end.ok()) return end;
  return absl::FailedPreconditionError(
      absl::StrCat("seq: the session stream ended without running bulk command ", seq));
}

}  // namespace

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
      it->second->FinishLocked(absl::FailedPreconditionError(
          absl::StrCat("seq: command ", seq, " is a bulk create; its bytes come through Upload")));
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
void BulkTransfers::Attach(TransferMap<State> BulkTransfers::*member,
                           const std::shared_ptr<State>& state, const Direction& direction) {
  const uint64_t seq = state->seq;
  bool kick = false;
  {
    absl::MutexLock lock(&mu_);
    TransferMap<State>& transfers = this->*member;  // Guarded by mu_, held from here.
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
      reject =
          absl::FailedPreconditionError(absl::StrCat("seq: command ", seq, direction.wrong_kind));
    } else if (!waited && seq <= last_seq_) {
      reject =
          absl::FailedPreconditionError(absl::StrCat("seq: command ", seq, direction.not_kind));
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
  Attach(&BulkTransfers::uploads_, upload, kUpload);
}

void BulkTransfers::AttachDownload(const std::shared_ptr<DownloadState>& download) {
  static constexpr Direction kDownload = {
      false, "a download", " is a bulk create; its bytes come through Upload",
      " already ran, or is not a bulk read (duplicate download?)"};
  Attach(&BulkTransfers::downloads_, download, kDownload);
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
      if (!u.pieces.empty() && !u.pieces.front().ok()) {
        u.FinishLocked(u.pieces.front().status());
      } else if (!u.pieces.empty()) {
        u.FinishLocked(absl::InvalidArgumentError(
            absl::StrCat("data: a chunk at offset ", u.pieces.front()->offset, " after all ",
                         u.total, " bytes (total_size) arrived; the create itself succeeded")));
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
  const UploadPiece* piece = nullptr;  // Stable while `writing`: only its callback drops it.
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
      error = absl::InvalidArgumentError(absl::StrCat("total_size: the upload declares ", u->total,
                                                      " bytes but command ", seq, " (",
                                                      KindName(command->kind), ") needs ", total));
    } else if (!u->pieces.empty()) {
      const absl::StatusOr<UploadPiece>& p = u->pieces.front();
      if (!p.ok()) {
        error = p.status();
      } else if (p->size == 0 || p->size > kMaxBulkChunk) {
        error = absl::InvalidArgumentError(
            absl::StrCat("data: a chunk of ", p->size, " bytes at offset ", p->offset,
                         "; chunks are 1 .. ", kMaxBulkChunk, " bytes"));
      } else if (p->offset != u->received) {
        error = absl::InvalidArgumentError(
            absl::StrCat("offset: a chunk at offset ", p->offset, " but ", u->received,
                         " bytes came before it; chunks come in order, without gaps"));
      } else if (p->size > total - u->received) {
        error = absl::InvalidArgumentError(absl::StrCat("data: the chunk [", p->offset, ", +",
                                                        p->size, ") goes past total_size ", total));
      } else {
        u->writing = true;
        piece = &*p;
        offset = u->received;
      }
    } else if (u->closed) {
      error = absl::InvalidArgumentError(absl::StrCat("total_size: the upload ended after ",
                                                      u->received, " of ", total, " bytes"));
    }
    if (error.ok()) {
      // From now on gRPC reads ahead (up to kUploadWindow chunks) while the loop writes.
      u->flowing = true;
      u->StartReadLocked();
    }
    if (piece == nullptr && error.ok() && u->received != total) return false;  // Next chunk.
  }
  if (piece == nullptr) {
    EndWait(device, runner, sink, error);
    return true;
  }
  const uint64_t seq = command->seq;
  std::weak_ptr<BulkTransfers> self = weak_from_this();
  device.WritePiece(runner.session(), command->id, command->shape, command->strides,
                    command->elem_size, offset, piece->data, absl::Now(),
                    [self, u, seq, n = piece->size](absl::Status s) {
                      {
                        absl::MutexLock tl(&u->mu);
                        u->writing = false;
                        if (!u->pieces.empty()) u->pieces.pop_front();  // The one written.
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
                               "a bulk read piece of ", bytes, " bytes read ", ready.data->size()));
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

}  // namespace cubed
