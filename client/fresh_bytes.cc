#include "client/fresh_bytes.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
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

Prefault::Prefault(std::vector<std::pair<char*, uint64_t>> ranges, unsigned min_cores) {
  constexpr uint64_t kMinBytes = uint64_t{16} << 20;
  static constexpr uint64_t kStep = uint64_t{4} << 20;
  uint64_t total = 0;
  for (const auto& [p, n] : ranges) total += n;
  if (total < kMinBytes || std::thread::hardware_concurrency() < min_cores) return;
  thread_ = std::thread([this, ranges = std::move(ranges)] {
    const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    for (const auto& [p, n] : ranges) {
      // Whole pages inside the range: a page it shares with other memory is left alone.
      uintptr_t at = (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);
      const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n) & ~(page - 1);
      for (; at < end && !stop_.load(std::memory_order_relaxed); at += kStep) {
        const uintptr_t len = std::min<uintptr_t>(kStep, end - at);
        if (madvise(reinterpret_cast<void*>(at), len, MADV_POPULATE_WRITE) != 0) return;
      }
    }
  });
}

Prefault::~Prefault() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

std::string CopyForRead(const uint8_t* data, uint64_t n) {
  std::string s;
  SizeForRead(s, n);
  if (n != 0) std::memcpy(s.data(), data, n);
  return s;
}

}  // namespace cubed
