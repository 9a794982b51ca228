#include "server/device_loop.h"

#include <utility>

#include "absl/time/clock.h"

namespace cubed {
namespace {

// Leases are checked at least this often, and at the earliest expiry.
constexpr absl::Duration kLeaseCheckPeriod = absl::Milliseconds(250);

}  // namespace

DeviceLoop::DeviceLoop(std::unique_ptr<Device> device)
    : device_(std::move(device)), thread_([this] { Run(); }) {}

DeviceLoop::~DeviceLoop() { Stop(); }

bool DeviceLoop::Post(Task task) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return false;
  tasks_.push_back(std::move(task));
  return true;
}

void DeviceLoop::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

size_t DeviceLoop::queued() const {
  absl::MutexLock lock(&mu_);
  return tasks_.size();
}

void DeviceLoop::Run() {
  std::deque<Task> batch;
  for (;;) {
    const absl::Time now = absl::Now();
    const absl::Time wake = std::min(now + kLeaseCheckPeriod, device_->NextExpiry());
    bool stop = false;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !tasks_.empty() || stopping_; };
      mu_.AwaitWithDeadline(absl::Condition(&ready), wake);
      batch.swap(tasks_);
      stop = stopping_ && batch.empty();
    }
    for (Task& task : batch) std::move(task)(*device_);
    batch.clear();
    device_->ExpireSessions(absl::Now());
    if (stop) break;
  }
  device_.reset();  // Closes every session and frees every page on the loop thread.
}

}  // namespace cubed
