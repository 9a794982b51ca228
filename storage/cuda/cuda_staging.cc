#include "storage/cuda/cuda_staging.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/cuda/cuda_driver.h"
#include "common/status_macros.h"

namespace cubed {
namespace {

uint64_t BucketSize(uint64_t size) {
  uint64_t bucket = PinnedStagingPool::kMinBufferBytes;
  while (bucket < size) bucket <<= 1;
  return bucket;
}

}  // namespace

PinnedStagingPool::PinnedStagingPool(const CudaContext* context, uint64_t max_bytes)
    : context_(context), max_bytes_(std::max(max_bytes, 2 * kChunkBytes)) {}

PinnedStagingPool::~PinnedStagingPool() {
  absl::MutexLock lock(&mu_);
  if (!context_->MakeCurrent().ok()) return;
  for (auto& [size, buffers] : free_) {
    for (uint8_t* data : buffers) Cu().MemFreeHost(data);
  }
}

absl::StatusOr<PinnedStagingPool::Buffer> PinnedStagingPool::Acquire(uint64_t size) {
  if (size == 0 || size > kChunkBytes) {
    return absl::InternalError(absl::StrCat("staging buffer of ", size, " bytes requested; 1 .. ",
                                            kChunkBytes, " expected"));
  }
  const uint64_t bucket = BucketSize(size);
  std::vector<uint8_t*> to_free;
  {
    absl::MutexLock lock(&mu_);
    for (;;) {
      std::vector<uint8_t*>& same = free_[bucket];
      if (!same.empty()) {
        Buffer buffer{same.back(), bucket};
        same.pop_back();
        --free_count_;
        return buffer;
      }
      if (held_ + bucket <= max_bytes_) break;
      if (free_count_ > 0) {  // Make room by freeing idle buffers of other sizes.
        for (auto& [other, buffers] : free_) {
          while (!buffers.empty() && held_ + bucket > max_bytes_) {
            to_free.push_back(buffers.back());
            buffers.pop_back();
            --free_count_;
            held_ -= other;
          }
        }
        continue;
      }
      const size_t seen = free_count_;
      auto released = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return free_count_ != seen; };
      mu_.Await(absl::Condition(&released));
    }
    held_ += bucket;
  }
  RETURN_IF_ERROR(context_->MakeCurrent());
  for (uint8_t* data : to_free) Cu().MemFreeHost(data);
  void* data = nullptr;
  const CUresult result = Cu().MemHostAlloc(&data, bucket, 0);
  if (result != CUDA_SUCCESS) {
    absl::MutexLock lock(&mu_);
    held_ -= bucket;
    const absl::Status status = CU_STATUS(result);
    if (result == CUDA_ERROR_OUT_OF_MEMORY) {
      return absl::ResourceExhaustedError(absl::StrCat("out of pinned host memory for a ", bucket,
                                                       "-byte staging buffer: ", status.message()));
    }
    return status;
  }
  return Buffer{static_cast<uint8_t*>(data), bucket};
}

void PinnedStagingPool::Release(Buffer buffer) {
  if (buffer.data == nullptr) return;
  absl::MutexLock lock(&mu_);
  free_[buffer.capacity].push_back(buffer.data);
  ++free_count_;
}

uint64_t PinnedStagingPool::bytes_held() const {
  absl::MutexLock lock(&mu_);
  return held_;
}

}  // namespace cubed
