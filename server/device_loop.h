#pragma once

// DeviceLoop: the channel of one device (ARCHITECTURE.md §1). One thread owns the Device and runs
// the tasks posted to it, strictly in order; it also closes sessions whose lease has passed.
// Nothing else touches the Device, so the Device needs no locks.

#include <deque>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "server/device.h"

namespace cubed {

class DeviceLoop {
 public:
  using Task = absl::AnyInvocable<void(Device&)>;

  // Starts the loop thread, which takes ownership of `device`.
  explicit DeviceLoop(std::unique_ptr<Device> device);
  // Stops the loop (see Stop) and destroys the Device, freeing all its memory.
  ~DeviceLoop();

  // Queues `task` to run on the loop thread after every task posted before it. Thread-safe.
  // Returns false (and drops the task) once Stop has begun: the caller answers UNAVAILABLE.
  bool Post(Task task);

  // Runs the tasks already queued, then ends the thread and destroys the Device (every session
  // closed, every slice freed). Idempotent. Thread-safe; must not be called from the loop.
  void Stop();

  // Tasks queued and not yet started (for metrics and tests). Thread-safe.
  size_t queued() const;

 private:
  void Run();

  mutable absl::Mutex mu_;
  std::deque<Task> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<Device> device_;  // Touched only by the loop thread once it started.
  std::thread thread_;
};

}  // namespace cubed
