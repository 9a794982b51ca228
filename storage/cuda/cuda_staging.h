#pragma once

// PinnedStagingPool: page-locked host buffers through which every host<->device copy goes, so
// that copies are truly asynchronous DMA (a copy from pageable memory makes the driver stage it
// itself, synchronously). Buffers are reused; sizes are powers of two from 64 KiB to one chunk
// (16 MiB); larger transfers are split into chunks, each in its own buffer, so a 1 GiB upload
// streams through the pool while earlier chunks are still in flight. The pool holds at most
// `max_bytes` of pinned memory; when all of it is in flight, Acquire waits for the completion
// thread to return a buffer (the one place the server loop waits for the device: backpressure on
// transfers larger than the pool).

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/cuda/cuda_context.h"

namespace cubed {

// Acquire is called by the server-loop thread; Release by any thread. Thread-safe.
class PinnedStagingPool {
 public:
  static constexpr uint64_t kMinBufferBytes = uint64_t{64} << 10;
  static constexpr uint64_t kChunkBytes = uint64_t{16} << 20;  // Largest buffer.

  struct Buffer {
    uint8_t* data = nullptr;
    uint64_t capacity = 0;
  };

  // `max_bytes` is raised to at least two chunks (double buffering).
  PinnedStagingPool(const CudaContext* context, uint64_t max_bytes = uint64_t{64} << 20);
  // Frees every buffer. Every acquired buffer must have been released.
  ~PinnedStagingPool();

  PinnedStagingPool(const PinnedStagingPool&) = delete;
  PinnedStagingPool& operator=(const PinnedStagingPool&) = delete;

  // A buffer of at least `size` (1 .. kChunkBytes) bytes. The caller must arrange its Release
  // (normally in a completion callback) before acquiring the next one, or Acquire could wait for
  // itself. RESOURCE_EXHAUSTED when the host refuses pinned memory.
  absl::StatusOr<Buffer> Acquire(uint64_t size);
  void Release(Buffer buffer);

  // Pinned bytes held now, in use or free (for tests and metrics).
  uint64_t bytes_held() const;

 private:
  const CudaContext* context_;
  const uint64_t max_bytes_;
  mutable absl::Mutex mu_;
  uint64_t held_ ABSL_GUARDED_BY(mu_) = 0;
  size_t free_count_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint64_t, std::vector<uint8_t*>> free_ ABSL_GUARDED_BY(mu_);  // By size.
};

}  // namespace cubed
