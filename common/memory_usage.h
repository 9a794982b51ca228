#pragma once

#include <cstdint>

namespace cubed {

// CubeCL's MemoryUsage: exact at the moment it is taken.
struct MemoryUsage {
  uint64_t number_allocs = 0;   // Live slices.
  uint64_t bytes_in_use = 0;    // Sum of the requested sizes of live slices.
  uint64_t bytes_padding = 0;   // Alignment/split padding attached to live slices.
  uint64_t bytes_reserved = 0;  // Bytes held from the storage (pages).

  MemoryUsage& operator+=(const MemoryUsage& o) {
    number_allocs += o.number_allocs;
    bytes_in_use += o.bytes_in_use;
    bytes_padding += o.bytes_padding;
    bytes_reserved += o.bytes_reserved;
    return *this;
  }
  friend bool operator==(const MemoryUsage& a, const MemoryUsage& b) {
    return a.number_allocs == b.number_allocs && a.bytes_in_use == b.bytes_in_use &&
           a.bytes_padding == b.bytes_padding && a.bytes_reserved == b.bytes_reserved;
  }
  friend bool operator!=(const MemoryUsage& a, const MemoryUsage& b) { return !(a == b); }
};

}  // namespace cubed
