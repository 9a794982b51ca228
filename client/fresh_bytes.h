#pragma once

// Result buffers for large reads. A read's result is fresh memory; faulting 256 MiB in 4 KiB
// pages costs more than copying the bytes (140 ms against 30 ms in 2 MiB pages on the VM), so
// large results ask for transparent huge pages before their first touch.

#include <cstdint>
#include <string>

namespace cubed {

// Sizes `s` to `n` bytes (zero-filled) for a read to fill, advising transparent huge pages for
// the whole 2 MiB pages of a buffer of 4 MiB or more (advice only: ignored where THP is off).
// Any thread; allocation failure throws std::bad_alloc as std::string does.
void SizeForRead(std::string& s, uint64_t n);

// As SizeForRead, but leaves `s` empty with room for `n` bytes: a read that appends its bytes in
// order touches each page first with the copy itself (no zero-fill pass, and the faults spread
// over the transfer instead of coming all at once before its first byte).
void ReserveForRead(std::string& s, uint64_t n);

// A new string holding the `n` bytes at `data`, sized by SizeForRead.
std::string CopyForRead(const uint8_t* data, uint64_t n);

}  // namespace cubed
