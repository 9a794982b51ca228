#include "client/release_batcher.h"

#include <algorithm>
#include <utility>

namespace cubed {

ReleaseBatcher::ReleaseBatcher(SendFn send, size_t batch_size, absl::Duration delay)
    : send_(std::move(send)), batch_size_(std::max<size_t>(batch_size, 1)), delay_(delay) {
  flusher_ = std::thread([this] { FlusherLoop(); });
}

ReleaseBatcher::~ReleaseBatcher() { Close(); }

void ReleaseBatcher::Enqueue(uint64_t id, std::shared_ptr<const void> keep) {
  absl::MutexLock lock(&mu_);
  if (keep != nullptr) buried_.push_back(std::move(keep));
  if (closed_) return;
  if (pending_.empty()) first_queued_ = absl::Now();
  pending_.push_back(id);
  // Wake the flusher to start its timer (first id) or to send a full batch.
  if (pending_.size() == 1 || pending_.size() >= batch_size_) wake_.Signal();
}

void ReleaseBatcher::KeepUntilEnd(std::shared_ptr<const void> keep) {
  if (keep == nullptr) return;
  absl::MutexLock lock(&mu_);
  kept_.push_back(std::move(keep));
}

std::vector<std::shared_ptr<const void>> ReleaseBatcher::TakeBuried() {
  absl::MutexLock lock(&mu_);
  return std::exchange(buried_, {});
}

void ReleaseBatcher::Rebury(std::vector<std::shared_ptr<const void>> keeps) {
  absl::MutexLock lock(&mu_);
  for (auto& k : keeps) buried_.push_back(std::move(k));
}

void ReleaseBatcher::DropAll() {
  std::vector<std::shared_ptr<const void>> buried, kept;
  {
    absl::MutexLock lock(&mu_);
    buried = std::exchange(buried_, {});
    kept = std::exchange(kept_, {});
  }
  // Destroyed outside the lock: a keep-alive's deleter may free memory or call anything.
}

void ReleaseBatcher::SendSome() {
  const size_t n = std::min(pending_.size(), kMaxIdsPerCall);
  std::vector<uint64_t> ids(pending_.begin(), pending_.begin() + n);
  pending_.erase(pending_.begin(), pending_.begin() + n);
  if (!pending_.empty()) first_queued_ = absl::Now();
  ++in_flight_;
  mu_.Unlock();
  absl::Status status = send_(ids);
  mu_.Lock();
  --in_flight_;
  if (!status.ok() && first_error_.ok()) first_error_ = std::move(status);
}

void ReleaseBatcher::FlusherLoop() {
  absl::MutexLock lock(&mu_);
  while (!closed_) {
    if (pending_.empty()) {
      wake_.Wait(&mu_);
      continue;
    }
    if (pending_.size() < batch_size_) {
      const absl::Time due = first_queued_ + delay_;
      if (absl::Now() < due) {
        wake_.WaitWithDeadline(&mu_, due);
        continue;
      }
    }
    SendSome();
  }
}

absl::Status ReleaseBatcher::Flush() {
  absl::MutexLock lock(&mu_);
  while (!closed_ && !pending_.empty()) SendSome();
  mu_.Await(absl::Condition(
      +[](int* in_flight) { return *in_flight == 0; }, &in_flight_));
  return std::exchange(first_error_, absl::OkStatus());
}

void ReleaseBatcher::Close() {
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    pending_.clear();
    wake_.SignalAll();
  }
  if (flusher_.joinable()) flusher_.join();
}

}  // namespace cubed
