#pragma once

// SliceId, SliceLocation and MemoryOwner: how the pools and the MemoryManager name one
// reservation and whose bytes a piece of memory holds.

#include <cstdint>

#include "storage/compute_storage.h"

namespace cubed {

// Identifies one reservation (a slice). Never reused within a manager's lifetime (64-bit).
using SliceId = uint64_t;

// Where a slice lives inside storage.
struct SliceLocation {
  StorageId storage = 0;  // The page.
  uint64_t offset = 0;    // Byte offset of the slice inside the page (aligned).
  uint64_t size = 0;      // Requested bytes of the slice.
  // Bytes the slice occupies in its page from `offset` (>= size: the size rounded up to the
  // alignment, or the whole of a reused exclusive page). A dirty reservation is zeroed over all
  // of them (Note [Owner-tagged memory], memory_manager.cc).
  uint64_t extent = 0;
};

// Whose bytes a piece of pool memory holds (Note [Owner-tagged memory], memory_manager.cc): a
// session's serial (kFirstSessionOwner and up, from its Device; never reused), or one of the two
// special values below.
using MemoryOwner = uint64_t;
// Content unknown or mixed: every owner must zero it. The default, so that a tag nobody set is
// the safe one.
inline constexpr MemoryOwner kUnknownOwner = 0;
// Bytes known to be zero: any owner may take them as they are.
inline constexpr MemoryOwner kZeroedOwner = 1;
// The first serial a Device hands to a session.
inline constexpr MemoryOwner kFirstSessionOwner = 2;

// The tag of two adjacent free pieces merged into one: the common owner, the other one's when
// one is zeroed, else unknown.
constexpr MemoryOwner CombineOwners(MemoryOwner a, MemoryOwner b) {
  if (a == b) return a;
  if (a == kZeroedOwner) return b;
  if (b == kZeroedOwner) return a;
  return kUnknownOwner;
}

// Whether memory tagged `tag` must be zeroed before `owner` may see it: unless it is zero already
// or holds `owner`'s own bytes (an unknown owner never owns anything).
constexpr bool MustZeroFor(MemoryOwner tag, MemoryOwner owner) {
  return tag != kZeroedOwner && (tag != owner || owner == kUnknownOwner);
}

}  // namespace cubed
