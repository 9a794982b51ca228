#pragma once

// SliceId and SliceLocation: how the pools and the MemoryManager name one reservation.

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
};

}  // namespace cubed
