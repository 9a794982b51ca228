#include "client/region_staging.h"

#include <algorithm>
#include <utility>

namespace cubed {

const Region* RegionStaging::Acquire(uint64_t bytes) {
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &RegionStaging::Available));
    if (off_) return nullptr;
    busy_ = true;
  }
  if (region_.has_value() && region_->memory->size() >= bytes) return &*region_;
  // Doubling, in 2 MiB steps, so a growing workload registers few regions.
  constexpr uint64_t kStep = uint64_t{2} << 20;
  uint64_t size = std::max(bytes, region_.has_value() ? 2 * region_->memory->size() : 0);
  size = (size + kStep - 1) / kStep * kStep;
  absl::StatusOr<SharedMemory> memory = SharedMemory::Create(size);
  absl::StatusOr<Region> region =
      memory.ok() ? client_.RegisterRegion(std::make_shared<SharedMemory>(*std::move(memory)))
                  : absl::StatusOr<Region>(memory.status());
  if (!region.ok()) {
    absl::MutexLock lock(&mu_);
    off_ = true;
    busy_ = false;
    return nullptr;
  }
  if (region_.has_value()) (void)client_.ReleaseRegion(*region_);  // After its commands.
  region_ = *std::move(region);
  return &*region_;
}

void RegionStaging::Release() {
  absl::MutexLock lock(&mu_);
  busy_ = false;
}

}  // namespace cubed
