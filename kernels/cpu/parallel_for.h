#pragma once

// A process-wide pool of worker threads for the CPU kernels. See Note [ParallelFor] in
// parallel_for.cc.

#include <cstdint>

#include "absl/functional/function_ref.h"

namespace cubed::kernels {

// Threads ParallelFor runs on: the pool's workers plus the calling thread. Equals
// std::thread::hardware_concurrency() (at least 1). The pool is created on first use and lives
// until the process exits.
uint32_t Parallelism();

// Runs fn(begin, end) over disjoint chunks that cover [0, n), on the pool and the calling thread,
// and returns once every chunk has finished. Chunks hold at least `grain` items (except the
// last); when n <= grain everything runs inline on the caller. Thread-safe: concurrent and nested
// calls are fine. `fn` must not throw.
void ParallelFor(uint64_t n, uint64_t grain, absl::FunctionRef<void(uint64_t, uint64_t)> fn);

}  // namespace cubed::kernels
