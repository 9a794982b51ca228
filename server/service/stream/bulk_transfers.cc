#include "server/service/stream/bulk_transfers.h"

#include <algorithm>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

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

// The lanes of `seq` in a transfer map: [first, second).
template <typename Map>
auto LanesOf(Map& transfers, uint64_t seq) {
  return std::make_pair(transfers.lower_bound({seq, 0}),
                        transfers.upper_bound({seq, std::numeric_limits<uint32_t>::max()}));
}

// Why lane `b` cannot join the lanes of its command, of which `a` came first; OK when it can.
absl::Status Disagreement(const UploadState& a, const UploadState& b) {
  if (a.lanes == b.lanes && a.total == b.total) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("lanes: lane ", b.lane, " of the upload for command ", b.seq, " declares ",
                   b.lanes, " lanes and total_size ", b.total, ", lane ", a.lane, " declared ",
                   a.lanes, " and ", a.total, "; the lanes of one create agree"));
}
absl::Status Disagreement(const DownloadState& a, const DownloadState& b) {
  if (a.lanes == b.lanes && a.chunk_bytes == b.chunk_bytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "lanes: lane ", b.lane, " of the download for command ", b.seq, " asks for ", b.lanes,
      " lanes and chunk_bytes ", b.chunk_bytes, ", lane ", a.lane, " asked for ", a.lanes, " and ",
      a.chunk_bytes, "; the lanes of one read agree"));
}

}  // namespace

struct BulkTransfers::Wait {
  StreamCommand command;
  bool upload = false;
  uint64_t total = 0;                  // Upload: the bytes it must bring.
  std::unique_ptr<BulkReadPlan> plan;  // Download: once its first lane attached.
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
  RaiseLastSeq(seq);
  // Transfers of earlier seqs will never be joined.
  if (seq > 0) EndUnjoinedLocked(seq - 1);
  if (!status.ok()) {
    EndLanesLocked(uploads_, seq, status);
    EndLanesLocked(downloads_, seq, status);
    RememberFailureLocked(seq, status);  // Lanes still to come end with it too.
    return false;
  }
  wait_ = std::make_unique<Wait>();
  wait_->upload = IsBulkCreate(command);
  wait_->total = command.size;
  wait_->command = std::move(command);
  kicked_ = true;  // Its transfer may be here already.
  // Transfers of the wrong direction attached early fail now.
  if (wait_->upload) {
    EndLanesLocked(downloads_, seq,
                   absl::FailedPreconditionError(absl::StrCat(
                       "seq: command ", seq, " is a bulk create; its bytes come through Upload")));
  } else {
    EndLanesLocked(uploads_, seq,
                   absl::FailedPreconditionError(absl::StrCat(
                       "seq: command ", seq, " is a bulk read; its bytes come through Download")));
  }
  return true;
}

template <typename State>
void BulkTransfers::EndLanesLocked(TransferMap<State>& transfers, uint64_t seq,
                                   const absl::Status& status) {
  auto [it, end] = LanesOf(transfers, seq);
  while (it != end) {
    {
      absl::MutexLock tl(&it->second->mu);
      it->second->FinishLocked(status);
    }
    it = transfers.erase(it);
    --attached_;
  }
}

void BulkTransfers::RaiseLastSeq(uint64_t seq) {
  if (seq > last_seq_.load(std::memory_order_relaxed)) last_seq_.store(seq);
}

void BulkTransfers::Passed(uint64_t seq) {
  // With no transfer attached there is nothing to end. The seq is published before attached_ is
  // read, and Attach counts its transfer in attached_ before it reads last_seq_ (both seq_cst):
  // so either Attach sees this seq and refuses a transfer for it, or this sees the transfer and
  // ends it under mu_ (which Attach holds until the transfer is in its map).
  RaiseLastSeq(seq);
  if (attached_.load() == 0) return;
  absl::MutexLock lock(&mu_);
  EndUnjoinedLocked(seq);
}

void BulkTransfers::EndUnjoinedLocked(uint64_t seq) {
  auto end_upto = [&](auto& transfers) {
    for (auto it = transfers.begin(); it != transfers.end() && it->first.first <= seq;) {
      {
        absl::MutexLock tl(&it->second->mu);
        if constexpr (std::is_same_v<std::decay_t<decltype(*it->second)>, UploadState>) {
          // It brought its command's bytes; it ends once the client half-closes (SettleLocked).
          if (it->second->complete) {
            ++it;
            continue;
          }
        }
        it->second->FinishLocked(absl::FailedPreconditionError(absl::StrCat(
            "seq: command ", it->first.first, " is not a bulk command of this stream")));
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
  const LaneKey key{seq, state->lane};
  bool kick = false;
  {
    absl::MutexLock lock(&mu_);
    TransferMap<State>& transfers = this->*member;  // Guarded by mu_, held from here.
    const bool waited = wait_ != nullptr && wait_->command.seq == seq;
    ++attached_;  // Before last_seq_ is read: see Passed. Taken back if refused.
    absl::Status reject;
    if (ended_) {
      reject = EndedStatus(end_status_, seq);
    } else if (auto f = failed_.find(seq); f != failed_.end()) {
      reject = f->second;  // Kept: the command's other lanes may still come.
    } else if (transfers.count(key) != 0) {
      reject = absl::FailedPreconditionError(absl::StrCat(
          "seq: command ", seq, " already has ", direction.one, " (lane ", key.second, ")"));
    } else if (waited && wait_->upload != direction.upload) {
      reject =
          absl::FailedPreconditionError(absl::StrCat("seq: command ", seq, direction.wrong_kind));
    } else if (!waited && seq <= last_seq_.load()) {
      reject =
          absl::FailedPreconditionError(absl::StrCat("seq: command ", seq, direction.not_kind));
    }
    if (!reject.ok()) {
      --attached_;
      absl::MutexLock tl(&state->mu);
      state->FinishLocked(reject);
      return;
    }
    // A lane that disagrees with the lanes before it fails its command (Note [Bulk lanes]).
    auto [first, last] = LanesOf(transfers, seq);
    const absl::Status disagreement =
        first != last ? Disagreement(*first->second, *state) : absl::OkStatus();
    {
      absl::MutexLock tl(&state->mu);
      state->owner = weak_from_this();  // An upload's reactor already set it (FindBulk).
      if (!disagreement.ok() && state->error.ok()) state->error = disagreement;
    }
    transfers.emplace(key, state);
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
  auto [up, up_end] = LanesOf(uploads_, seq);
  while (up != up_end) {
    UploadState& u = *up->second;
    bool done = true;
    {
      absl::MutexLock tl(&u.mu);
      if (u.complete) {
        if (!u.pieces.empty() && !u.pieces.front().ok()) {
          u.FinishLocked(u.pieces.front().status());
        } else if (!u.pieces.empty()) {
          u.FinishLocked(absl::InvalidArgumentError(absl::StrCat(
              "data: a chunk at offset ", u.pieces.front()->offset, " after all ", u.end - u.begin,
              " bytes of lane ", u.lane, " arrived; the create itself succeeded")));
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
    }
    if (done) {
      up = uploads_.erase(up);
      --attached_;
    } else {
      ++up;
    }
  }
  auto [down, down_end] = LanesOf(downloads_, seq);
  while (down != down_end) {
    DownloadState& d = *down->second;
    bool done = false;
    {
      absl::MutexLock tl(&d.mu);
      if (d.cancelled || d.failed) {
        const absl::Status s = absl::CancelledError(absl::StrCat(
            "the client cancelled the download for command ", seq, " before the command ran"));
        RememberFailureLocked(seq, s);
        d.FinishLocked(s);
        done = true;
      }
    }
    if (done) {
      down = downloads_.erase(down);
      --attached_;
    } else {
      ++down;
    }
  }
}

void BulkTransfers::EndAll(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (ended_) return;
  ended_ = true;
  end_status_ = status;
  for (auto& [key, u] : uploads_) {
    absl::MutexLock tl(&u->mu);
    if (u->complete && status.ok()) {
      u->FinishLocked(absl::OkStatus());
    } else {
      u->FinishLocked(EndedStatus(status, key.first));
    }
  }
  for (auto& [key, d] : downloads_) {
    absl::MutexLock tl(&d->mu);
    d->FinishLocked(EndedStatus(status, key.first));
  }
  uploads_.clear();
  downloads_.clear();
  attached_ = 0;
}

bool BulkTransfers::Step(Device& device, StreamRunner& runner, ReplySink& sink) {
  bool upload = false;
  absl::Status failed;
  {
    absl::MutexLock lock(&mu_);
    kicked_ = false;
    if (ended_) return false;
    if (wait_ == nullptr) return true;
    upload = wait_->upload;
    // A lane cancelled before the command ran: the command fails with that.
    if (auto f = failed_.find(wait_->command.seq); f != failed_.end()) failed = f->second;
  }
  if (!failed.ok()) {
    EndWait(device, runner, sink, failed);
    return true;
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
  if (!status.ok()) RememberFailureLocked(seq, recorded);  // For lanes still to come.
  if (ended_) return;
  if (wait->upload && status.ok()) {
    // Each lane ends once its client half-closed (SettleLocked).
    auto [it, end] = LanesOf(uploads_, seq);
    for (; it != end; ++it) {
      absl::MutexLock tl(&it->second->mu);
      it->second->complete = true;
    }
    SettleLocked(seq);
    return;
  }
  EndLanesLocked(uploads_, seq, recorded);
  EndLanesLocked(downloads_, seq, recorded);
}

bool BulkTransfers::StepUpload(Device& device, StreamRunner& runner, ReplySink& sink) {
  std::vector<std::shared_ptr<UploadState>> lanes;
  uint64_t total = 0;
  const StreamCommand* command = nullptr;
  {
    absl::MutexLock lock(&mu_);
    auto [it, end] = LanesOf(uploads_, wait_->command.seq);
    for (; it != end; ++it) lanes.push_back(it->second);
    total = wait_->total;
    command = &wait_->command;  // Stable: only this thread ends the wait.
  }
  if (lanes.empty()) return false;
  const uint64_t seq = command->seq;
  // Every lane agrees on the lane count (Attach), so the first one's is the command's.
  bool complete = lanes.size() == lanes.front()->lanes;
  absl::Status error;
  struct Write {
    std::shared_ptr<UploadState> lane;
    const UploadPiece* piece;  // Stable while `writing`: only its callback drops it.
    uint64_t offset;
  };
  std::vector<Write> writes;
  // Writes issued by earlier steps: the wait ends (even with an error) only once they are done.
  bool in_flight = false;
  for (const std::shared_ptr<UploadState>& u : lanes) {
    absl::MutexLock tl(&u->mu);
    in_flight = in_flight || u->writing;
  }
  for (const std::shared_ptr<UploadState>& u : lanes) {
    absl::MutexLock tl(&u->mu);
    const uint64_t bytes = u->end - u->begin;
    if (!u->error.ok()) {
      error = u->error;
    } else if (u->total != total) {
      error = absl::InvalidArgumentError(absl::StrCat("total_size: the upload declares ", u->total,
                                                      " bytes but command ", seq, " (",
                                                      KindName(command->kind), ") needs ", total));
    } else if (u->received == bytes) {
      // Every byte of this lane is in.
    } else if (u->cancelled) {
      error =
          absl::CancelledError(absl::StrCat("the client cancelled the upload after ", u->received,
                                            " of ", bytes, " bytes (lane ", u->lane, ")"));
    } else if (u->writing) {
      // A write of this lane is in flight; its callback kicks the stream.
    } else if (!u->pieces.empty()) {
      const absl::StatusOr<UploadPiece>& p = u->pieces.front();
      const uint64_t next = u->begin + u->received;
      if (!p.ok()) {
        error = p.status();
      } else if (p->size == 0 || p->size > kMaxBulkChunk) {
        error = absl::InvalidArgumentError(
            absl::StrCat("data: a chunk of ", p->size, " bytes at offset ", p->offset,
                         "; chunks are 1 .. ", kMaxBulkChunk, " bytes"));
      } else if (p->offset != next) {
        error = absl::InvalidArgumentError(
            absl::StrCat("offset: a chunk at offset ", p->offset, " but the next byte of lane ",
                         u->lane, " is ", next, "; a lane's chunks come in order, without gaps"));
      } else if (p->size > bytes - u->received) {
        error = absl::InvalidArgumentError(absl::StrCat(
            "data: the chunk [", p->offset, ", +", p->size, ") goes past the end of lane ", u->lane,
            " (", u->end, "; total_size ", total, ")"));
      } else {
        u->writing = true;
        writes.push_back(Write{u, &*p, next});
      }
    } else if (u->closed) {
      error = absl::InvalidArgumentError(absl::StrCat("total_size: the upload ended after ",
                                                      u->received, " of ", bytes, " bytes (lane ",
                                                      u->lane, ")"));
    }
    if (!error.ok()) break;
    // From now on gRPC reads ahead (up to kUploadWindow chunks) while the loop writes.
    u->flowing = true;
    u->StartReadLocked();
    if (u->received != bytes || u->writing) complete = false;
  }
  if (!error.ok()) {
    // The writes just chosen are not issued; the wait ends once none is in flight (the error
    // stays where it was found, so a later step finds it again).
    for (Write& w : writes) {
      absl::MutexLock tl(&w.lane->mu);
      w.lane->writing = false;
    }
    if (in_flight) return false;
    EndWait(device, runner, sink, error);
    return true;
  }
  if (complete) {
    EndWait(device, runner, sink, absl::OkStatus());
    return true;
  }
  std::weak_ptr<BulkTransfers> self = weak_from_this();
  for (Write& w : writes) {
    device.WritePiece(runner.session(), command->id, command->shape, command->strides,
                      command->elem_size, w.offset, w.piece->data, absl::Now(),
                      [self, u = w.lane, seq, n = w.piece->size](absl::Status s) {
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
  }
  return false;
}

bool BulkTransfers::StepDownload(Device& device, StreamRunner& runner, ReplySink& sink) {
  std::vector<std::shared_ptr<DownloadState>> lanes;
  struct Issue {
    std::shared_ptr<DownloadState> lane;
    uint64_t index;  // In its lane.
    BulkPiece piece;
    std::vector<uint64_t> sizes;  // For a lane's first piece.
  };
  std::vector<Issue> issue;
  absl::Status error;
  bool finished = false;
  uint64_t seq = 0;
  {
    absl::MutexLock lock(&mu_);
    seq = wait_->command.seq;
    auto [it, end] = LanesOf(downloads_, seq);
    for (; it != end; ++it) lanes.push_back(it->second);
    if (lanes.empty()) return false;
    if (wait_->plan == nullptr) {
      // The lanes agree on chunk_bytes (Attach): the first one's cuts the pieces.
      absl::StatusOr<std::unique_ptr<BulkReadPlan>> plan =
          BulkReadPlan::Make(wait_->command.read_tensor, lanes.front()->chunk_bytes);
      if (plan.ok()) {
        wait_->plan = *std::move(plan);
      } else {
        error = plan.status();
      }
    }
    finished = error.ok() && lanes.size() == lanes.front()->lanes;
    for (const std::shared_ptr<DownloadState>& d : lanes) {
      if (!error.ok()) break;
      absl::MutexLock tl(&d->mu);
      BulkReadPlan& plan = *wait_->plan;
      if (!d->error.ok()) {
        error = d->error;
      } else if (d->cancelled || d->failed) {
        error = absl::CancelledError(absl::StrCat("the client cancelled the download after ",
                                                  d->written, " bytes (lane ", d->lane, ")"));
      } else if (plan.done() && d->issued == 0) {
        // Nothing (left) for this lane: one chunk with the sizes only.
        v1::DownloadChunk msg;
        for (uint64_t s : plan.sizes()) msg.add_sizes(s);
        d->ready.emplace(d->issued++, DownloadPiece{DownloadHeader(msg, 0), nullptr});
        ++d->outstanding;
        d->MaybeWriteLocked();
      } else {
        while (!plan.done() && d->outstanding < kDownloadWindow) {
          Issue next{d, d->issued++, plan.Next(), {}};
          if (next.index == 0) next.sizes = plan.sizes();
          issue.push_back(std::move(next));
          ++d->outstanding;
        }
      }
      if (!plan.done() || d->outstanding != 0) finished = false;
    }
  }
  if (!error.ok() || finished) {
    EndWait(device, runner, sink, error);
    return true;
  }
  std::weak_ptr<BulkTransfers> self = weak_from_this();
  for (Issue& i : issue) {
    v1::DownloadChunk msg;
    for (uint64_t s : i.sizes) msg.add_sizes(s);
    msg.set_binding(i.piece.binding);
    msg.set_offset(i.piece.offset);
    DownloadPiece ready{DownloadHeader(msg, i.piece.bytes), std::make_unique<std::string>()};
    std::string* out = ready.data.get();
    device.ReadPiece(runner.session(), i.piece.ref, out, absl::Now(),
                     [self, d = i.lane, seq, index = i.index, ready = std::move(ready),
                      bytes = i.piece.bytes](absl::Status s) mutable {
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
