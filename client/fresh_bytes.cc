#include "client/fresh_bytes.h"

#include <sys/mman.h>

#include <cstring>

namespace cubed {

void ReserveForRead(std::string& s, uint64_t n) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  s.clear();
  s.reserve(n);
  if (n >= 2 * kHuge) {
    const uintptr_t begin = (reinterpret_cast<uintptr_t>(s.data()) + kHuge - 1) & ~(kHuge - 1);
    const uintptr_t end = (reinterpret_cast<uintptr_t>(s.data()) + n) & ~(kHuge - 1);
    if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  }
}

void SizeForRead(std::string& s, uint64_t n) {
  ReserveForRead(s, n);
  s.resize(n);
}

std::string CopyForRead(const uint8_t* data, uint64_t n) {
  std::string s;
  SizeForRead(s, n);
  if (n != 0) std::memcpy(s.data(), data, n);
  return s;
}

}  // namespace cubed
