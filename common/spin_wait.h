#pragma once

// Spin-waits of the threads that hand work to each other on one host (the command ring's
// threads, the device loop, the SDKs' waits for a reply): Note [Spin checks].

#include <cstdint>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace cubed {

// One step of a spin-wait: tells the CPU this thread is spinning (x86 pause, arm yield).
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Note [Spin checks]: a spinning thread looks at what it waits for after every pause and at the
// clock only every 64 pauses. A pause costs 40-140 cycles on current x86 server cores (Skylake
// made it ~140); the ring threads used to look once per 32 pauses, i.e. every 1-2 us, so each
// hand-off between two spinning threads waited half that on average, on a 4-byte read's path
// (four hand-offs) more than the driver's copy. A look is one load of a shared word; the clock,
// ~20 ns, is what is worth sparing.
//
// Calls `ready` until it returns true or `spin` has passed; returns its last answer. A spin of
// zero or less calls it once. Any thread; `ready` must be cheap and may be called often.
template <typename Ready>
bool SpinUntil(absl::Duration spin, Ready&& ready) {
  if (ready()) return true;
  if (spin <= absl::ZeroDuration()) return false;
  const absl::Time until = absl::Now() + spin;
  for (uint32_t i = 1;; ++i) {  // Wraps after 2^32 pauses: harmless, the clock is read anyway.
    CpuRelax();
    if (ready()) return true;
    if ((i & 63) == 0 && absl::Now() >= until) return false;
  }
}

}  // namespace cubed
