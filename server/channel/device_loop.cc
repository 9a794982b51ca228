#include "server/channel/device_loop.h"

#include <exception>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/thread_name.h"
#include "spdlog/spdlog.h"

namespace cubed {
namespace {

// Leases are checked at least this often, and at the earliest expiry.
constexpr absl::Duration kLeaseCheckPeriod = absl::Milliseconds(250);

}  // namespace

DeviceLoop::DeviceLoop(std::unique_ptr<Device> device)
    : device_(std::move(device)), thread_([this] { Run(); }) {}

DeviceLoop::~DeviceLoop() { Stop(); }

bool DeviceLoop::Post(Task task, ExceptionHandler on_exception) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return false;
  tasks_.push_back(Posted{std::move(task), std::move(on_exception)});
  return true;
}

void DeviceLoop::RunGuarded(Posted& posted) {
  absl::Status error;
  try {
    std::move(posted.task)(*device_);
    return;
  } catch (const std::bad_alloc& e) {
    error = absl::ResourceExhaustedError(
        absl::StrCat("the daemon ran out of host memory serving this request (", e.what(), ")"));
  } catch (const std::exception& e) {
    error = absl::InternalError(absl::StrCat("the daemon failed this request: ", e.what()));
  } catch (...) {
    error = absl::InternalError("the daemon failed this request: unknown exception");
  }
  exceptions_.fetch_add(1, std::memory_order_relaxed);
  spdlog::error("device {}: a loop task threw; its request fails: {}", device_->index(),
                error.ToString());
  if (posted.on_exception == nullptr) return;
  try {
    std::move(posted.on_exception)(std::move(error));
  } catch (...) {
    spdlog::error("device {}: a loop task's exception handler threw too", device_->index());
  }
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
  NameThisThread("cubed-loop");
  std::deque<Posted> batch;
  for (;;) {
    const absl::Time now = absl::Now();
    const absl::Time wake = std::min(now + kLeaseCheckPeriod, device_->NextExpiry());
    bool stop = false;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]()
                       ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !tasks_.empty() || stopping_; };
      mu_.AwaitWithDeadline(absl::Condition(&ready), wake);
      batch.swap(tasks_);
      stop = stopping_ && batch.empty();
    }
    for (Posted& posted : batch) RunGuarded(posted);
    batch.clear();
    device_->ExpireSessions(absl::Now());
    if (stop) break;
  }
  device_.reset();  // Closes every session and frees every page on the loop thread.
}

}  // namespace cubed
