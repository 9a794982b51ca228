#include "server/channel/device_loop.h"

#include <exception>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/spin_wait.h"
#include "common/thread_name.h"
#include "spdlog/spdlog.h"

namespace cubed {
namespace {

// Leases are checked at least this often, and at the earliest expiry.
constexpr absl::Duration kLeaseCheckPeriod = absl::Milliseconds(250);

}  // namespace

DeviceLoop::DeviceLoop(std::unique_ptr<Device> device, absl::Duration spin)
    : spin_(spin), device_(std::move(device)), thread_([this] { Run(); }) {}

DeviceLoop::~DeviceLoop() { Stop(); }

bool DeviceLoop::Post(Task task, ExceptionHandler on_exception) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return false;
  tasks_.push_back(Posted{std::move(task), std::move(on_exception)});
  posted_.fetch_add(1, std::memory_order_release);
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

// Note [Loop spin]: a client waiting for an answer (a read, a sync) sends its next command soon
// after the answer; a loop asleep on its condition then costs a futex wake-up per command, tens
// of microseconds on a virtual machine. After running tasks the loop therefore watches the posted
// count for up to --loop_spin_us (automatic: 50 us on hosts with 8 or more cores, else 0, as for
// the ring threads) before it sleeps; an idle loop spins once, then sleeps, so it burns nothing.
void DeviceLoop::SpinForTask(uint64_t seen) const {
  SpinUntil(spin_, [&] { return posted_.load(std::memory_order_acquire) != seen; });
}

void DeviceLoop::Run() {
  NameThisThread("cubed-loop");
  std::deque<Posted> batch;
  uint64_t seen = 0;  // posted_ when the last batch was taken.
  bool worked = false;
  for (;;) {
    // Note [Loop spin]: only right after work, so an idle loop sleeps.
    if (worked) SpinForTask(seen);
    const absl::Time now = absl::Now();
    const absl::Time wake = std::min(now + kLeaseCheckPeriod, device_->NextExpiry());
    bool stop = false;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]()
                       ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !tasks_.empty() || stopping_; };
      mu_.AwaitWithDeadline(absl::Condition(&ready), wake);
      seen = posted_.load(std::memory_order_relaxed);
      batch.swap(tasks_);
      stop = stopping_ && batch.empty();
    }
    worked = !batch.empty();
    for (Posted& posted : batch) RunGuarded(posted);
    batch.clear();
    device_->ExpireSessions(absl::Now());
    if (stop) break;
  }
  device_.reset();  // Closes every session and frees every page on the loop thread.
}

}  // namespace cubed
