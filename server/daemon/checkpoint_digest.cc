#include "server/daemon/checkpoint_digest.h"

#include <utility>

#include "absl/status/status.h"
#include "common/crypto/sha256.h"

namespace cubed {

DigestThread::DigestThread() : thread_([this] { Run(); }) {}

DigestThread::~DigestThread() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void DigestThread::Add(absl::Span<const uint8_t> bytes, bool first, bool last) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(Piece{bytes, first, last});
}

absl::StatusOr<std::vector<std::string>> DigestThread::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](DigestThread* t)
           ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) { return t->queue_.empty() && !t->busy_; },
      this));
  if (failed_) return absl::InternalError("checkpoint: libcrypto failed computing a SHA-256");
  return std::exchange(done_, {});
}

void DigestThread::Run() {
  Sha256 hasher;
  while (true) {
    Piece piece;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](DigestThread* t)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) { return !t->queue_.empty() || t->stop_; },
          this));
      if (queue_.empty()) return;  // Stopping, and nothing left.
      piece = queue_.front();
      queue_.pop_front();
      busy_ = true;
    }
    if (piece.first) hasher.Reset();
    hasher.Update(piece.bytes);
    absl::StatusOr<std::string> digest;
    if (piece.last) digest = hasher.Finish();
    absl::MutexLock lock(&mu_);
    busy_ = false;
    if (!piece.last) continue;
    if (!digest.ok()) failed_ = true;
    done_.push_back(digest.ok() ? *std::move(digest) : std::string());
  }
}

}  // namespace cubed
