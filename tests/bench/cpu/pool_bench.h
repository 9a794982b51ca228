#pragma once

// P5 and P6: the CPU backend's MemoryManager over HostStorage, in this process (the same code the
// daemon's server loop runs), with no gRPC involved.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/bench/cpu/bench_report.h"

namespace cubed::cpubench {

struct PoolOptions {
  int live_slices = 1000;      // Slices (and malloc blocks) held during the P5 timing.
  int pairs_per_batch = 5000;  // Reserve+Free pairs per timed batch.
  int batches = 30;            // Timed batches per size and allocator.
};

// P5: ns per warm Reserve+Free pair for 256 B, 64 KiB and 1 MiB with `live_slices` held, against
// malloc+free of the same sizes with as many blocks held. One row per size, each followed by a
// diagnostic row: the same pairs with two owners (sessions) taking turns, so that every
// reservation is dirty and zeroed (Note [Owner-tagged memory], storage/memory_manager.cc). The
// calling thread is pinned to its current CPU meanwhile.
absl::StatusOr<std::vector<Row>> MeasurePoolAllocFree(const PoolOptions& options);

struct TraceOptions {
  int allocations = 4000;  // Reservations in one trace.
  int max_lifetime = 200;  // Each lives 1 .. max_lifetime later allocations (uniform).
  uint64_t min_size = 64;  // Sizes log-uniform in [min_size, max_size].
  uint64_t max_size = 64ull << 20;
  std::vector<uint64_t> seeds = {1, 2, 3, 4, 5};
};

// P6: peak bytes reserved from storage ÷ peak live (requested) bytes over a seeded random trace;
// the median over the seeds, with their range. One row.
absl::StatusOr<Row> MeasureTraceOverhead(const TraceOptions& options);

}  // namespace cubed::cpubench
