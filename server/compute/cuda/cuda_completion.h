#pragma once

// CudaCompletionQueue: the backend's completion thread. The server loop never waits for the
// device; it records an event after the work a caller waits for and queues a callback here. One
// thread waits for the events in the order they were queued (cuEventSynchronize on events made
// with CU_EVENT_BLOCKING_SYNC, so it sleeps rather than spins) and runs each callback: it copies
// read-back bytes out of pinned staging, returns staging buffers, and answers the caller.
//
// Note [Completion order]: one stream runs everything in order, so events complete in the order
// they were recorded and waiting for them in queue order is exact. Callbacks queued without an
// event run after every callback queued before them; this is how an error found part-way through
// a read is reported only after the copies already queued into the caller's buffers are done.
//
// Note [Completion spin]: sleeping costs a waiter its wake-up: a blocking-sync event wakes its
// thread through an interrupt, and an empty queue wakes it through a futex, tens of microseconds
// each, which a 4-byte read pays on top of the copy (PyTorch's .item() polls instead). With a
// spin (--completion_spin_us; 50 us on hosts with 8 or more cores, 0 on smaller ones, where a
// spinning thread would take the core the work needs) the thread polls the event (cuEventQuery)
// and the queue for that long before it sleeps; long waits still sleep.

#include <cuda.h>

#include <atomic>
#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/cuda/cuda_context.h"

namespace cubed {

// Enqueue methods are called by the server-loop thread; callbacks run on the completion thread
// and must not block.
class CudaCompletionQueue {
 public:
  using Callback = absl::AnyInvocable<void(absl::Status)>;

  // Starts the thread (with `context` current on it). `on_error` is told of every failed event
  // record (on the loop thread) or wait (on the completion thread); a sticky error there means
  // the device is lost. It must be thread-safe.
  // `spin`: how long to poll before sleeping (Note [Completion spin]); zero: never.
  CudaCompletionQueue(const CudaContext* context, absl::AnyInvocable<void(absl::Status)> on_error,
                      absl::Duration spin = absl::ZeroDuration());
  // Runs every queued callback (waiting for its event), then ends the thread and destroys the
  // pooled events.
  ~CudaCompletionQueue();

  CudaCompletionQueue(const CudaCompletionQueue&) = delete;
  CudaCompletionQueue& operator=(const CudaCompletionQueue&) = delete;

  // Records an event on `stream` after the work queued so far and queues `callback`, which runs
  // with OK once that work has finished, or with the error of the wait (or of the record, in
  // which case it still runs after every earlier callback).
  void After(CUstream stream, Callback callback);

  // Queues `callback` to run with the status of waiting for `event`, an event the caller
  // recorded and still owns (profiles use timing events). The event must stay alive until then.
  void AfterEvent(CUevent event, Callback callback);

  // Queues `callback` to run with `status`, after every callback queued before it.
  void Then(absl::Status status, Callback callback);

  // Callbacks queued and not yet run (for tests). Thread-safe.
  size_t pending() const;

  // Whether every callback queued so far has run to its end. Exact when called by the thread
  // that queues (the server loop): nothing can be queued meanwhile.
  bool Idle() const { return unfinished_.load(std::memory_order_acquire) == 0; }

 private:
  struct Item {
    CUevent event = nullptr;  // Null: no wait.
    bool pooled = false;      // The event goes back to free_events_ after the wait.
    absl::Status status;      // Passed instead of waiting when not OK.
    Callback callback;
  };

  void Push(Item item);
  void Run();
  // Waits for `event`: polls it for spin_ first (Note [Completion spin]).
  absl::Status Wait(CUevent event);
  // Returns once an item is queued or spin_ passed (Note [Completion spin]).
  void SpinForItem() const;
  // A fresh or recycled blocking-sync, timing-disabled event.
  absl::StatusOr<CUevent> TakeEvent();

  const CudaContext* context_;
  const absl::Duration spin_;
  absl::AnyInvocable<void(absl::Status)> on_error_;
  mutable absl::Mutex mu_;
  std::deque<Item> items_ ABSL_GUARDED_BY(mu_);
  std::atomic<size_t> queued_{0};      // items_.size(), for SpinForItem to read without mu_.
  std::atomic<size_t> unfinished_{0};  // Queued or running callbacks (Idle()).
  std::vector<CUevent> free_events_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace cubed
