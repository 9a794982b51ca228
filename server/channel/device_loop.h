#pragma once

// DeviceLoop: the channel of one device (ARCHITECTURE.md §1). One thread owns the Device and runs
// the tasks posted to it, strictly in order; it also closes sessions whose lease has passed.
// Nothing else touches the Device, so the Device needs no locks.
//
// Note [Loop task exceptions]: request handling reports failures as absl::Status, but a C++
// exception (std::bad_alloc when the host runs out of memory, std::length_error from a container)
// must never end the daemon for everyone. The loop runs each task under a catch-all: the
// exception is logged, counted (exceptions()), turned into a status (RESOURCE_EXHAUSTED for
// std::bad_alloc, INTERNAL otherwise: a bug) and handed to the task's `on_exception`, which fails
// the task's own request (a unary call finishes with it, a stream ends with it, closing its
// session). The loop then serves the next task.

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/channel/device.h"

namespace cubed {

class DeviceLoop {
 public:
  using Task = absl::AnyInvocable<void(Device&)>;
  // Called on the loop thread, instead of nothing, when `task` threw (Note [Loop task
  // exceptions]); it must not throw.
  using ExceptionHandler = absl::AnyInvocable<void(absl::Status)>;

  // Starts the loop thread, which takes ownership of `device`. Note [Loop spin]: after running
  // tasks the loop watches for the next one for up to `spin` before it sleeps (0: it sleeps at
  // once), so that a client's next command does not wait for a thread wake-up.
  explicit DeviceLoop(std::unique_ptr<Device> device, absl::Duration spin = absl::ZeroDuration());
  // Stops the loop (see Stop) and destroys the Device, freeing all its memory.
  ~DeviceLoop();

  // Queues `task` to run on the loop thread after every task posted before it. Thread-safe.
  // Returns false (and drops the task) once Stop has begun: the caller answers UNAVAILABLE.
  bool Post(Task task, ExceptionHandler on_exception = nullptr);

  // Runs the tasks already queued, then ends the thread and destroys the Device (every session
  // closed, every slice freed). Idempotent. Thread-safe; must not be called from the loop.
  void Stop();

  // Tasks queued and not yet started (for metrics and tests). Thread-safe.
  size_t queued() const;

  // Tasks that threw so far (Note [Loop task exceptions]). Thread-safe.
  uint64_t exceptions() const { return exceptions_.load(std::memory_order_relaxed); }

 private:
  struct Posted {
    Task task;
    ExceptionHandler on_exception;
  };
  void Run();
  // Runs one task under the catch-all of Note [Loop task exceptions].
  void RunGuarded(Posted& posted);

  // Spins until a task was posted after `seen` tasks, or for spin_; returns at once without spin_.
  void SpinForTask(uint64_t seen) const;

  const absl::Duration spin_;
  mutable absl::Mutex mu_;
  std::deque<Posted> tasks_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> posted_{0};  // Tasks posted so far; read without mu_ while spinning.
  std::atomic<uint64_t> exceptions_{0};
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<Device> device_;  // Touched only by the loop thread once it started.
  std::thread thread_;
};

}  // namespace cubed
