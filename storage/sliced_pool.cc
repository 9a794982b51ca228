#include "storage/sliced_pool.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "common/status_macros.h"

// Note [Sliced pool]
// A page is one storage allocation of page_size bytes, cut into blocks that tile it exactly:
// each block is a slice (live) or free, its offset and size are multiples of the alignment, and
// the blocks of a page form a doubly linked list in offset order. A request of `size` bytes needs
// RoundUp(size, alignment) bytes; the difference is the slice's padding (alignment 64, 40 bytes
// -> 24 bytes of padding).
//
// Reserve is best fit over every free block of every page: free_ is ordered by (size, page
// serial, offset), so lower_bound(need) is the smallest block that fits, ties going to the
// oldest page and the lowest offset, which packs work into old pages and lets new ones empty out.
// The block is split: the rest, if any, stays a free block (always a multiple of the alignment,
// so there is no sub-alignment scrap). Free merges the block with a free predecessor and a free
// successor at once, so no two free blocks are ever adjacent and a page with no live slice is a
// single free block of page_size bytes. Both are O(log n) in the number of free blocks plus O(1)
// hash lookups; nothing scans pages or slices. Every block carries an owner tag (Note
// [Owner-tagged memory] in memory_manager.cc): a live block its owner's, a free block the tag of
// the bytes it holds. Splitting gives the rest the block's tag; merging combines the tags.
//
// Each page counts its live slices; when that falls to 0 the page's bytes are added to
// free_page_bytes(), and Cleanup() returns exactly those pages (unlike CubeCL v0.5, whose sliced
// pages were never freed). Pages are named by a 64-bit serial and a pointer, never by an index
// into a vector, so returning a page cannot renumber others (CubeCL #1384, #1617).

namespace cubed {

struct SlicedPool::Page {
  StorageId storage = 0;
  uint64_t serial = 0;
  uint64_t live = 0;       // Live slices in this page.
  Block* first = nullptr;  // Block at offset 0.
};

struct SlicedPool::Block {
  Page* page = nullptr;
  uint64_t offset = 0;
  uint64_t size = 0;  // Multiple of the alignment.
  // Live: the owner it was reserved for. Free: whose bytes it holds (Note [Owner-tagged memory]).
  MemoryOwner owner = kUnknownOwner;
  SliceId id = 0;          // Live blocks only.
  uint64_t requested = 0;  // Live blocks only: the requested size (1 .. size); 0 when free.
  Block* prev = nullptr;
  Block* next = nullptr;

  // Free blocks have no requested size (a slice has at least one byte); this keeps a block in
  // 64 bytes, one cache line, with its owner tag.
  bool free() const { return requested == 0; }
};

SlicedPool::SlicedPool(ComputeStorage* storage, uint64_t page_size, uint64_t max_slice_size,
                       uint64_t alignment)
    : storage_(storage), alignment_(alignment) {
  page_size_ = CheckedRoundUp(std::max<uint64_t>(page_size, 1), alignment_)
                   .value_or(std::numeric_limits<uint64_t>::max() & ~(alignment_ - 1));
  max_slice_size_ = std::min(max_slice_size, page_size_);
}

SlicedPool::~SlicedPool() {
  for (auto& [serial, page] : pages_) {
    for (Block* block = page->first; block != nullptr;) {
      Block* next = block->next;
      delete block;
      block = next;
    }
    storage_->Dealloc(page->storage);
  }
}

SlicedPool::FreeKey SlicedPool::KeyOf(const Block* block) {
  return FreeKey(block->size, block->page->serial, block->offset);
}

void SlicedPool::InsertFree(Block* block) { free_.emplace(KeyOf(block), block); }

void SlicedPool::EraseFree(Block* block) { free_.erase(KeyOf(block)); }

std::optional<MemoryOwner> SlicedPool::TryReserve(SliceId id, uint64_t size, MemoryOwner owner) {
  if (size == 0 || size > max_slice_size_) return std::nullopt;
  auto it = free_.lower_bound(FreeKey(RoundUp(size), 0, 0));
  if (it == free_.end()) return std::nullopt;
  Block* block = it->second;
  free_.erase(it);
  return Carve(block, id, size, owner);
}

absl::StatusOr<MemoryOwner> SlicedPool::ReserveInNewPage(SliceId id, uint64_t size,
                                                         MemoryOwner owner) {
  if (size == 0 || size > max_slice_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("sliced pool: a slice of ", size, " bytes is outside 1..", max_slice_size_));
  }
  ASSIGN_OR_RETURN(StorageId storage, storage_->Alloc(page_size_));
  auto page = std::make_unique<Page>();
  page->storage = storage;
  page->serial = next_page_serial_++;
  page->first = new Block{page.get(), 0, page_size_};
  page->first->owner =
      storage_->capabilities().zeroes_new_allocations ? kZeroedOwner : kUnknownOwner;
  Block* block = page->first;
  pages_.emplace(page->serial, std::move(page));
  usage_.bytes_reserved += page_size_;
  free_page_bytes_ += page_size_;  // Empty until Carve.
  return Carve(block, id, size, owner);
}

MemoryOwner SlicedPool::Carve(Block* block, SliceId id, uint64_t size, MemoryOwner owner) {
  const uint64_t need = RoundUp(size);
  const MemoryOwner previous = block->owner;
  if (block->size > need) {
    Block* rest = new Block{block->page, block->offset + need, block->size - need};
    rest->owner = previous;
    rest->prev = block;
    rest->next = block->next;
    if (block->next != nullptr) block->next->prev = rest;
    block->next = rest;
    block->size = need;
    InsertFree(rest);
  }
  block->owner = owner;
  block->id = id;
  block->requested = size;
  if (block->page->live++ == 0) free_page_bytes_ -= page_size_;
  live_.emplace(id, block);
  usage_.number_allocs += 1;
  usage_.bytes_in_use += size;
  usage_.bytes_padding += need - size;
  return previous;
}

bool SlicedPool::Free(SliceId id) {
  auto it = live_.find(id);
  if (it == live_.end()) return false;
  Block* block = it->second;
  live_.erase(it);
  usage_.number_allocs -= 1;
  usage_.bytes_in_use -= block->requested;
  usage_.bytes_padding -= block->size - block->requested;
  block->id = 0;
  block->requested = 0;
  // The block keeps its owner's tag (Note [Owner-tagged memory]); merging combines tags.
  if (Block* prev = block->prev; prev != nullptr && prev->free()) {
    EraseFree(prev);
    prev->owner = CombineOwners(prev->owner, block->owner);
    prev->size += block->size;
    prev->next = block->next;
    if (block->next != nullptr) block->next->prev = prev;
    delete block;
    block = prev;
  }
  if (Block* next = block->next; next != nullptr && next->free()) {
    EraseFree(next);
    block->owner = CombineOwners(block->owner, next->owner);
    block->size += next->size;
    block->next = next->next;
    if (next->next != nullptr) next->next->prev = block;
    delete next;
  }
  InsertFree(block);
  if (--block->page->live == 0) free_page_bytes_ += page_size_;
  return true;
}

bool SlicedPool::ForgetOwner(SliceId id) {
  auto it = live_.find(id);
  if (it == live_.end()) return false;
  it->second->owner = kUnknownOwner;
  return true;
}

std::optional<SliceLocation> SlicedPool::Locate(SliceId id) const {
  auto it = live_.find(id);
  if (it == live_.end()) return std::nullopt;
  const Block* block = it->second;
  return SliceLocation{block->page->storage, block->offset, block->requested, block->size};
}

void SlicedPool::Cleanup() {
  for (auto it = pages_.begin(); it != pages_.end();) {
    Page* page = it->second.get();
    if (page->live != 0) {
      ++it;
      continue;
    }
    // Merging keeps an empty page a single free block (Note [Sliced pool]).
    Block* block = page->first;
    EraseFree(block);
    delete block;
    storage_->Dealloc(page->storage);
    usage_.bytes_reserved -= page_size_;
    free_page_bytes_ -= page_size_;
    pages_.erase(it++);
  }
}

}  // namespace cubed
