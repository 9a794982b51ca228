#include "kernels/cpu/parallel_for.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace cubed::kernels {
namespace {

// Note [ParallelFor]
// One pool of hardware_concurrency() - 1 workers is created on first use and never destroyed
// (so no static destructor can join it while a device loop still runs kernels). A call splits
// [0, n) into chunks claimed through an atomic counter. It queues up to one helper task per
// worker and then claims chunks itself until none are left, so it always makes progress even
// when every worker is busy with other calls (or when it runs on a worker itself: nesting cannot
// deadlock). It then waits only for chunks already claimed by running helpers. A helper that
// starts after the call returned finds no chunk left and exits without touching `fn`; the job's
// state is shared so it outlives the call.

class ThreadPool {
 public:
  explicit ThreadPool(uint32_t workers) {
    threads_.reserve(workers);
    for (uint32_t i = 0; i < workers; ++i) threads_.emplace_back([this] { WorkerLoop(); });
  }

  uint32_t workers() const { return static_cast<uint32_t>(threads_.size()); }

  // Queues `count` copies of `task`.
  void Schedule(const std::function<void()>& task, uint32_t count) {
    absl::MutexLock lock(&mu_);
    for (uint32_t i = 0; i < count; ++i) queue_.push_back(task);
  }

 private:
  void WorkerLoop() {
    for (;;) {
      std::function<void()> task;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(this, &ThreadPool::HasWork));
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }

  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty(); }

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
};

ThreadPool& Pool() {
  static ThreadPool* pool = new ThreadPool(Parallelism() - 1);
  return *pool;
}

struct Job {
  uint64_t n = 0;
  uint64_t chunk = 0;
  uint64_t num_chunks = 0;
  const absl::FunctionRef<void(uint64_t, uint64_t)>* fn = nullptr;  // Valid while chunks remain.
  std::atomic<uint64_t> next{0};
  absl::Mutex mu;
  uint64_t finished ABSL_GUARDED_BY(mu) = 0;

  bool AllFinished() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return finished == num_chunks; }

  void Work() {
    uint64_t done = 0;
    for (;;) {
      const uint64_t c = next.fetch_add(1, std::memory_order_relaxed);
      if (c >= num_chunks) break;
      const uint64_t begin = c * chunk;
      (*fn)(begin, std::min(n, begin + chunk));
      ++done;
    }
    if (done > 0) {
      absl::MutexLock lock(&mu);
      finished += done;
    }
  }
};

}  // namespace

uint32_t Parallelism() {
  static const uint32_t threads = std::max(1u, std::thread::hardware_concurrency());
  return threads;
}

void ParallelFor(uint64_t n, uint64_t grain, absl::FunctionRef<void(uint64_t, uint64_t)> fn) {
  if (n == 0) return;
  grain = std::max<uint64_t>(grain, 1);
  const uint32_t threads = Parallelism();
  if (n <= grain || threads == 1) {
    fn(0, n);
    return;
  }
  // A few chunks per thread balance uneven progress without much claiming traffic.
  const uint64_t max_chunks = std::min<uint64_t>((n + grain - 1) / grain, uint64_t{threads} * 4);
  auto job = std::make_shared<Job>();
  job->n = n;
  job->chunk = (n + max_chunks - 1) / max_chunks;
  job->num_chunks = (n + job->chunk - 1) / job->chunk;
  job->fn = &fn;
  const uint32_t helpers =
      static_cast<uint32_t>(std::min<uint64_t>(Pool().workers(), job->num_chunks - 1));
  Pool().Schedule([job] { job->Work(); }, helpers);
  job->Work();
  absl::MutexLock lock(&job->mu);
  job->mu.Await(absl::Condition(job.get(), &Job::AllFinished));
}

}  // namespace cubed::kernels
