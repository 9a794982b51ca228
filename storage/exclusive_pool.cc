#include "storage/exclusive_pool.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "common/status_macros.h"

// Note [Exclusive pool]
// Large requests get a page of their own, sized exactly: the request rounded up to the alignment
// (no growth toward a running average as in CubeCL's exclusive pool; the caller decides which
// sizes come here). When the slice is freed its page is kept, indexed by (size, serial). A later
// request of `need` rounded bytes takes the smallest free page of at least `need` bytes, provided
// it is at most need + need/8 bytes: a tensor one size down may reuse a page, but a small request
// never sits in a page many times its size. The waste counts as the slice's padding. Pages
// nothing fits are kept until Cleanup() (the MemoryManager calls it when the limit or the device
// needs the room). Reserve and Free are O(log free pages). A page is tagged with its owner while
// live and keeps the tag when freed; a new page is tagged as its storage allocates (Note
// [Owner-tagged memory] in memory_manager.cc). A page is never split or merged.

namespace cubed {

ExclusivePool::ExclusivePool(ComputeStorage* storage, uint64_t alignment)
    : storage_(storage),
      alignment_(alignment),
      max_slice_size_(std::numeric_limits<uint64_t>::max() & ~(alignment - 1)) {}

ExclusivePool::~ExclusivePool() {
  for (auto& [serial, page] : pages_) storage_->Dealloc(page->storage);
}

uint64_t ExclusivePool::NewPageSize(uint64_t size) const {
  return CheckedRoundUp(size, alignment_).value_or(max_slice_size_);
}

MemoryOwner ExclusivePool::Assign(Page* page, SliceId id, uint64_t size, MemoryOwner owner) {
  const MemoryOwner previous = page->owner;
  page->owner = owner;
  page->id = id;
  page->requested = size;
  live_.emplace(id, page);
  usage_.number_allocs += 1;
  usage_.bytes_in_use += size;
  usage_.bytes_padding += page->size - size;
  return previous;
}

std::optional<MemoryOwner> ExclusivePool::TryReserve(SliceId id, uint64_t size, MemoryOwner owner) {
  if (size == 0 || size > max_slice_size_) return std::nullopt;
  const uint64_t need = NewPageSize(size);
  auto it = free_.lower_bound(FreeKey(need, 0));
  if (it == free_.end() || it->first.first - need > need / kMaxWasteDivisor) return std::nullopt;
  Page* page = it->second;
  free_.erase(it);
  free_page_bytes_ -= page->size;
  return Assign(page, id, size, owner);
}

absl::StatusOr<MemoryOwner> ExclusivePool::ReserveInNewPage(SliceId id, uint64_t size,
                                                            MemoryOwner owner) {
  if (size == 0 || size > max_slice_size_) {
    return absl::InvalidArgumentError(absl::StrCat("exclusive pool: a slice of ", size,
                                                   " bytes is outside 1..", max_slice_size_));
  }
  const uint64_t page_size = NewPageSize(size);
  ASSIGN_OR_RETURN(StorageId storage, storage_->Alloc(page_size));
  auto page = std::make_unique<Page>();
  page->storage = storage;
  page->serial = next_page_serial_++;
  page->size = page_size;
  page->owner = storage_->capabilities().zeroes_new_allocations ? kZeroedOwner : kUnknownOwner;
  Page* raw = page.get();
  pages_.emplace(raw->serial, std::move(page));
  usage_.bytes_reserved += page_size;
  return Assign(raw, id, size, owner);
}

bool ExclusivePool::Free(SliceId id) {
  auto it = live_.find(id);
  if (it == live_.end()) return false;
  Page* page = it->second;
  live_.erase(it);
  usage_.number_allocs -= 1;
  usage_.bytes_in_use -= page->requested;
  usage_.bytes_padding -= page->size - page->requested;
  page->id = 0;
  page->requested = 0;
  free_.emplace(FreeKey(page->size, page->serial), page);
  free_page_bytes_ += page->size;
  return true;
}

bool ExclusivePool::ForgetOwner(SliceId id) {
  auto it = live_.find(id);
  if (it == live_.end()) return false;
  it->second->owner = kUnknownOwner;
  return true;
}

std::optional<SliceLocation> ExclusivePool::Locate(SliceId id) const {
  auto it = live_.find(id);
  if (it == live_.end()) return std::nullopt;
  return SliceLocation{it->second->storage, 0, it->second->requested, it->second->size};
}

void ExclusivePool::Cleanup() {
  for (auto& [key, page] : free_) {
    storage_->Dealloc(page->storage);
    usage_.bytes_reserved -= page->size;
    pages_.erase(page->serial);
  }
  free_.clear();
  free_page_bytes_ = 0;
}

}  // namespace cubed
