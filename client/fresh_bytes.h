#pragma once

// Result buffers for large reads. A read's result is fresh memory; faulting 256 MiB in 4 KiB
// pages costs more than copying the bytes (140 ms against 30 ms in 2 MiB pages on the VM), so
// large results ask for transparent huge pages before their first touch.

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace cubed {

// Sizes `s` to `n` bytes (zero-filled) for a read to fill, advising transparent huge pages for
// the whole 2 MiB pages of a buffer of 4 MiB or more (advice only: ignored where THP is off).
// Any thread; allocation failure throws std::bad_alloc as std::string does.
void SizeForRead(std::string& s, uint64_t n);

// As SizeForRead, but leaves `s` empty with room for `n` bytes: a read that appends its bytes in
// order touches each page first with the copy itself (no zero-fill pass, and the faults spread
// over the transfer instead of coming all at once before its first byte).
void ReserveForRead(std::string& s, uint64_t n);

// Faults in the pages of `ranges` (room reserved by ReserveForRead, not yet written) on a thread
// of its own, front to back, so that the kernel's zeroing of fresh pages runs beside a reader
// that appends into them instead of inside its copies. The bytes are not changed (Linux
// MADV_POPULATE_WRITE, 5.14+; nothing where it is missing). Only with 16 MiB or more in all on a
// host of `min_cores` or more cores: with fewer the helper would only take the reader's core. The
// destructor stops it and joins; destroy it before the memory is freed.
class Prefault {
 public:
  explicit Prefault(std::vector<std::pair<char*, uint64_t>> ranges, unsigned min_cores = 4);
  ~Prefault();
  Prefault(const Prefault&) = delete;
  Prefault& operator=(const Prefault&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// A new string holding the `n` bytes at `data`, sized by SizeForRead.
std::string CopyForRead(const uint8_t* data, uint64_t n);

}  // namespace cubed
