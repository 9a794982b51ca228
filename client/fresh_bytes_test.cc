#include "client/fresh_bytes.h"

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace cubed {
namespace {

std::string Pattern(uint64_t n, uint64_t seed) {
  std::string s(n, '\0');
  for (uint64_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + seed) >> 3);
  return s;
}

// Pages of [p, p + n) resident now.
uint64_t ResidentPages(const char* p, uint64_t n) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n + page - 1) & ~(page - 1);
  std::vector<unsigned char> v((end - begin) / page);
  if (mincore(reinterpret_cast<void*>(begin), end - begin, v.data()) != 0) return 0;
  uint64_t resident = 0;
  for (unsigned char c : v) resident += c & 1;
  return resident;
}

// A reader appends while the helper faults the rest in: every byte is the reader's.
TEST(PrefaultTest, NeverChangesABytesWritten) {
  constexpr uint64_t kBytes = uint64_t{48} << 20;
  const std::string want = Pattern(kBytes, 7);
  std::string out;
  ReserveForRead(out, kBytes);
  out.append(want, 0, kBytes / 3);  // Written before the helper starts.
  {
    Prefault prefault({{out.data(), kBytes}}, /*min_cores=*/1);
    for (uint64_t at = kBytes / 3; at < kBytes; at += uint64_t{1} << 20) {
      out.append(want, at, std::min<uint64_t>(uint64_t{1} << 20, kBytes - at));
    }
  }
  EXPECT_TRUE(out == want);
}

// Left alone, the helper makes the whole untouched room resident.
TEST(PrefaultTest, FaultsInAnUntouchedRoom) {
  constexpr uint64_t kBytes = uint64_t{32} << 20;
  const uint64_t pages = kBytes / static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  std::string room;
  ReserveForRead(room, kBytes);
  ASSERT_LE(ResidentPages(room.data(), kBytes), 2u);
  Prefault prefault({{room.data(), kBytes}}, /*min_cores=*/1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (ResidentPages(room.data(), kBytes) + 2 < pages &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GE(ResidentPages(room.data(), kBytes) + 2, pages);
}

// With fewer cores than asked for it leaves the room untouched (the reader faults it in itself);
// destroyed at once, it stops and joins.
TEST(PrefaultTest, LeavesTheRoomAloneOnTooFewCoresAndStopsWhenDestroyed) {
  constexpr uint64_t kBytes = uint64_t{64} << 20;
  std::string room;
  ReserveForRead(room, kBytes);
  { Prefault prefault({{room.data(), kBytes}}, /*min_cores=*/1u << 30); }
  EXPECT_LE(ResidentPages(room.data(), kBytes), 2u);
  { Prefault prefault({{room.data(), kBytes}}, /*min_cores=*/1); }  // Stopped early: joins.
  EXPECT_TRUE(room.empty());
}

}  // namespace
}  // namespace cubed
