#include "storage/host_storage.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
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

uint64_t SystemPageSize() {
  static const uint64_t page = [] {
    const long size = sysconf(_SC_PAGESIZE);
    return size > 0 ? static_cast<uint64_t>(size) : kPageAlignment;
  }();
  return page;
}

// `size` bytes of fresh anonymous pages aligned to `alignment`; *mapped gets the bytes mapped.
// nullptr when the system refuses.
uint8_t* MapZeroed(uint64_t size, uint64_t alignment, uint64_t* mapped) {
  const uint64_t page = SystemPageSize();
  const uint64_t slack = alignment > page ? alignment - page : 0;
  std::optional<uint64_t> length = CheckedRoundUp(size, page);
  std::optional<uint64_t> with_slack = length ? CheckedAdd(*length, slack) : std::nullopt;
  if (!with_slack || *with_slack > std::numeric_limits<size_t>::max()) return nullptr;
  void* p = mmap(nullptr, *with_slack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  uint8_t* base = static_cast<uint8_t*>(p);
  if (slack == 0) {
    *mapped = *length;
    return base;
  }
  // Over-mapped by `slack`: unmap the unaligned head and the tail beyond `length`.
  const uint64_t head = (alignment - reinterpret_cast<uintptr_t>(base) % alignment) % alignment;
  if (head > 0) munmap(base, head);
  if (slack - head > 0) munmap(base + head + *length, slack - head);
  *mapped = *length;
  return base + head;
}

}  // namespace

HostStorage::HostStorage(HostStorageOptions options)
    : alignment_(NormalizeAlignment(options.alignment)), capacity_(options.capacity) {}

HostStorage::~HostStorage() {
  for (auto& [id, allocation] : allocations_) Release(allocation);
}

void HostStorage::Release(const Allocation& allocation) {
  if (allocation.mapped != 0) {
    munmap(allocation.ptr, allocation.mapped);
  } else {
    std::free(allocation.ptr);
  }
}

StorageCapabilities HostStorage::capabilities() const {
  StorageCapabilities capabilities;
  capabilities.zeroes_new_allocations = true;
  return capabilities;
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
  Allocation allocation;
  allocation.size = size;
  if (size >= SystemPageSize()) {
    // Fresh anonymous pages are zero, and munmap gives them back to the system.
    allocation.ptr = MapZeroed(size, alignment, &allocation.mapped);
  } else {
    // Under a page (the heap's own small chunks may hold this process's freed bytes): zeroed.
    const uint64_t rounded = (size + alignment - 1) & ~(alignment - 1);  // size < one page.
    void* ptr = nullptr;
    if (posix_memalign(&ptr, alignment, rounded) == 0 && ptr != nullptr) {
      std::memset(ptr, 0, rounded);
      allocation.ptr = static_cast<uint8_t*>(ptr);
    }
  }
  if (allocation.ptr == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("host storage: out of host memory allocating ",
                                                     size, " bytes (", bytes_allocated_,
                                                     " bytes allocated)"));
  }
  const StorageId id = next_id_++;
  allocations_.emplace(id, allocation);
  bytes_allocated_ += size;
  return id;
}

void HostStorage::Dealloc(StorageId id) {
  auto it = allocations_.find(id);
  if (it == allocations_.end()) {
    spdlog::warn("host storage: Dealloc of unknown storage id {} ignored", id);
    return;
  }
  Release(it->second);
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
