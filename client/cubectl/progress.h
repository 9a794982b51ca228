#pragma once

// A progress line on stderr for a long transfer, the way curl and apt draw theirs: redrawn in
// place with '\r' at most ten times a second and erased when the transfer ends, so that what
// stays on the terminal is the command's report. Shown only when both stdout and stderr are
// terminals and --quiet was not given (never in pipes, files or CI logs), and only for transfers
// of at least kProgressMinBytes.

#include <cstdint>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace cubed::cubectl {

inline constexpr uint64_t kProgressMinBytes = uint64_t{8} << 20;

// True when a transfer of `bytes` gets a progress line (see above).
bool ShowProgress(bool quiet, uint64_t bytes);

// One transfer's line: "read  [#########...........]  45%  120.0 MiB / 266.0 MiB  80.1 MiB/s".
// Bytes done are reported with Update; with an unknown pace (a single call that cannot report)
// the line shows the size and the time so far, redrawn by a thread of its own. Not thread-safe:
// owned by the command's thread.
class ProgressLine {
 public:
  // Draws nothing when !enabled.
  ProgressLine(std::string label, uint64_t total, bool enabled);
  // Erases the line.
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  // `done` bytes of `total` have moved.
  void Update(uint64_t done);
  // Redraws "label  SIZE  1.2 s" until destroyed, for a transfer that reports no progress.
  void TickUntilDone();

 private:
  void Draw(uint64_t done, bool known);

  const std::string label_;
  const uint64_t total_;
  const bool enabled_;
  const absl::Time start_;
  absl::Time last_draw_ = absl::InfinitePast();
  absl::Mutex draw_mutex_;  // Serializes writes to stderr between Update and the ticker.
  absl::Notification done_;
  std::thread ticker_;
};

}  // namespace cubed::cubectl
