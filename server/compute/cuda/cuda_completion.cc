#include "server/compute/cuda/cuda_completion.h"

#include <utility>

#include "absl/time/clock.h"
#include "common/cuda/cuda_driver.h"
#include "common/thread_name.h"
#include "spdlog/spdlog.h"

namespace cubed {

CudaCompletionQueue::CudaCompletionQueue(const CudaContext* context,
                                         absl::AnyInvocable<void(absl::Status)> on_error,
                                         absl::Duration spin)
    : context_(context), spin_(spin), on_error_(std::move(on_error)), thread_([this] { Run(); }) {}

CudaCompletionQueue::~CudaCompletionQueue() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
  absl::MutexLock lock(&mu_);
  for (CUevent event : free_events_) Cu().EventDestroy(event);
}

absl::StatusOr<CUevent> CudaCompletionQueue::TakeEvent() {
  {
    absl::MutexLock lock(&mu_);
    if (!free_events_.empty()) {
      CUevent event = free_events_.back();
      free_events_.pop_back();
      return event;
    }
  }
  CUevent event = nullptr;
  CU_RETURN_IF_ERROR(Cu().EventCreate(&event, CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING));
  return event;
}

void CudaCompletionQueue::After(CUstream stream, Callback callback) {
  Item item;
  item.callback = std::move(callback);
  absl::StatusOr<CUevent> event = TakeEvent();
  if (!event.ok()) {
    item.status = event.status();
  } else {
    item.status = CU_STATUS(Cu().EventRecord(*event, stream));
    if (item.status.ok()) {
      item.event = *event;
      item.pooled = true;
    } else {
      absl::MutexLock lock(&mu_);
      free_events_.push_back(*event);
    }
  }
  if (!item.status.ok() && on_error_) on_error_(item.status);
  Push(std::move(item));
}

void CudaCompletionQueue::AfterEvent(CUevent event, Callback callback) {
  Item item;
  item.event = event;
  item.callback = std::move(callback);
  Push(std::move(item));
}

void CudaCompletionQueue::Then(absl::Status status, Callback callback) {
  Item item;
  item.status = std::move(status);
  item.callback = std::move(callback);
  Push(std::move(item));
}

void CudaCompletionQueue::Push(Item item) {
  unfinished_.fetch_add(1, std::memory_order_relaxed);
  absl::MutexLock lock(&mu_);
  items_.push_back(std::move(item));
  queued_.fetch_add(1, std::memory_order_release);
}

size_t CudaCompletionQueue::pending() const {
  absl::MutexLock lock(&mu_);
  return items_.size();
}

absl::Status CudaCompletionQueue::Wait(CUevent event) {
  if (spin_ > absl::ZeroDuration() && Cu().EventQuery != nullptr) {
    const absl::Time until = absl::Now() + spin_;
    do {
      const CUresult r = Cu().EventQuery(event);
      if (r == CUDA_SUCCESS) return absl::OkStatus();
      if (r != CUDA_ERROR_NOT_READY) return CU_STATUS(r);
    } while (absl::Now() < until);
  }
  return CU_STATUS(Cu().EventSynchronize(event));
}

void CudaCompletionQueue::SpinForItem() const {
  if (spin_ <= absl::ZeroDuration()) return;
  const absl::Time until = absl::Now() + spin_;
  // Reads an atomic only: the loop's Push never waits for this thread's polling.
  while (queued_.load(std::memory_order_acquire) == 0 && absl::Now() < until) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
}

void CudaCompletionQueue::Run() {
  NameThisThread("cubed-cuda-done");
  const absl::Status current = context_->MakeCurrent();
  if (!current.ok()) spdlog::error("cuda completion thread: {}", current.ToString());
  for (;;) {
    Item item;
    SpinForItem();
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]()
                       ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !items_.empty() || stopping_; };
      mu_.Await(absl::Condition(&ready));
      if (items_.empty()) return;  // Stopping and drained.
      item = std::move(items_.front());
      items_.pop_front();
      queued_.fetch_sub(1, std::memory_order_relaxed);
    }
    absl::Status status = std::move(item.status);
    if (status.ok() && item.event != nullptr) {
      status = current.ok() ? Wait(item.event) : current;
      if (!status.ok() && on_error_) on_error_(status);
    }
    if (item.pooled) {
      absl::MutexLock lock(&mu_);
      free_events_.push_back(item.event);
    }
    std::move(item.callback)(std::move(status));
    unfinished_.fetch_sub(1, std::memory_order_release);  // After the callback's effects.
  }
}

}  // namespace cubed
