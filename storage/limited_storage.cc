#include "storage/limited_storage.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace cubed {

LimitedStorage::LimitedStorage(ComputeStorage* upstream, uint64_t limit)
    : upstream_(upstream), limit_(limit) {}

absl::StatusOr<StorageId> LimitedStorage::Alloc(uint64_t size) {
  if (size > bytes_available()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("allocating ", size, " bytes would pass the memory limit of ", limit_,
                     " bytes (", bytes_allocated_, " bytes held)"));
  }
  ASSIGN_OR_RETURN(StorageId id, upstream_->Alloc(size));
  sizes_.emplace(id, size);
  bytes_allocated_ += size;
  return id;
}

void LimitedStorage::Dealloc(StorageId id) {
  auto it = sizes_.find(id);
  if (it == sizes_.end()) {
    spdlog::warn("limited storage: Dealloc of unknown storage id {} ignored", id);
    return;
  }
  bytes_allocated_ -= it->second;
  sizes_.erase(it);
  upstream_->Dealloc(id);
}

absl::StatusOr<StorageResource> LimitedStorage::Resource(StorageId id) const {
  return upstream_->Resource(id);
}

}  // namespace cubed
