#include "storage/host_storage.h"

#include <cerrno>
#include <cstdlib>
#include <limits>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "spdlog/spdlog.h"

namespace cubed {
namespace {

constexpr uint64_t kMinAlignment = 64;
constexpr uint64_t kPageAlignment = 4096;

uint64_t NormalizeAlignment(uint64_t alignment) {
  uint64_t a = kMinAlignment;
  while (a < alignment && a < (uint64_t{1} << 62)) a <<= 1;
  return a;
}

}  // namespace

HostStorage::HostStorage(HostStorageOptions options)
    : alignment_(NormalizeAlignment(options.alignment)), capacity_(options.capacity) {}

HostStorage::~HostStorage() {
  for (auto& [id, allocation] : allocations_) std::free(allocation.ptr);
}

absl::StatusOr<StorageId> HostStorage::Alloc(uint64_t size) {
  if (size == 0) {
    return absl::InvalidArgumentError("host storage: cannot allocate 0 bytes");
  }
  if (size > capacity_ - bytes_allocated_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("host storage: allocating ", size, " bytes would pass its capacity of ",
                     capacity_, " bytes (", bytes_allocated_, " bytes allocated)"));
  }
  const uint64_t alignment =
      size >= kPageAlignment && alignment_ < kPageAlignment ? kPageAlignment : alignment_;
  std::optional<uint64_t> rounded = CheckedRoundUp(size, alignment);
  void* ptr = nullptr;
  if (!rounded.has_value() || *rounded > std::numeric_limits<size_t>::max() ||
      posix_memalign(&ptr, alignment, *rounded) != 0 || ptr == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("host storage: out of host memory allocating ",
                                                     size, " bytes (", bytes_allocated_,
                                                     " bytes allocated)"));
  }
  const StorageId id = next_id_++;
  allocations_.emplace(id, Allocation{static_cast<uint8_t*>(ptr), size});
  bytes_allocated_ += size;
  return id;
}

void HostStorage::Dealloc(StorageId id) {
  auto it = allocations_.find(id);
  if (it == allocations_.end()) {
    spdlog::warn("host storage: Dealloc of unknown storage id {} ignored", id);
    return;
  }
  std::free(it->second.ptr);
  bytes_allocated_ -= it->second.size;
  allocations_.erase(it);
}

absl::StatusOr<StorageResource> HostStorage::Resource(StorageId id) const {
  auto it = allocations_.find(id);
  if (it == allocations_.end()) {
    return absl::NotFoundError(absl::StrCat("host storage: unknown storage id ", id));
  }
  StorageResource resource;
  resource.host_ptr = it->second.ptr;
  resource.size = it->second.size;
  return resource;
}

}  // namespace cubed
