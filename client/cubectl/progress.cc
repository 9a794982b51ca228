#include "client/cubectl/progress.h"

#include <unistd.h>

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/cubectl/output.h"

namespace cubed::cubectl {
namespace {

constexpr int kBarWidth = 24;
constexpr absl::Duration kRedraw = absl::Milliseconds(100);

}  // namespace

bool ShowProgress(bool quiet, uint64_t bytes) {
  return !quiet && bytes >= kProgressMinBytes && isatty(STDOUT_FILENO) == 1 &&
         isatty(STDERR_FILENO) == 1;
}

ProgressLine::ProgressLine(std::string label, uint64_t total, bool enabled)
    : label_(std::move(label)), total_(total), enabled_(enabled), start_(absl::Now()) {}

ProgressLine::~ProgressLine() {
  done_.Notify();
  if (ticker_.joinable()) ticker_.join();
  if (!enabled_) return;
  // "\r", the line blanked, "\r": the report that follows starts at the left edge.
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
}

void ProgressLine::Update(uint64_t done) {
  if (!enabled_) return;
  const absl::Time now = absl::Now();
  if (done < total_ && now - last_draw_ < kRedraw) return;
  last_draw_ = now;
  Draw(done, /*known=*/true);
}

void ProgressLine::TickUntilDone() {
  if (!enabled_ || ticker_.joinable()) return;
  Draw(0, /*known=*/false);
  ticker_ = std::thread([this] {
    while (!done_.WaitForNotificationWithTimeout(kRedraw)) Draw(0, /*known=*/false);
  });
}

void ProgressLine::Draw(uint64_t done, bool known) {
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start_);
  std::string line;
  if (known) {
    const int filled = total_ == 0 ? kBarWidth : static_cast<int>(kBarWidth * done / total_);
    const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0;
    line =
        absl::StrFormat("%s  [%s%s] %3d%%  %s / %s  %s/s", label_, std::string(filled, '#'),
                        std::string(kBarWidth - filled, '.'),
                        total_ == 0 ? 100 : static_cast<int>(100 * done / total_), HumanSize(done),
                        HumanSize(total_), HumanSize(static_cast<uint64_t>(rate)));
  } else {
    line = absl::StrFormat("%s  %s  %.1f s", label_, HumanSize(total_), seconds);
  }
  absl::MutexLock lock(&draw_mutex_);
  std::fprintf(stderr, "\r\033[K%s", line.c_str());
  std::fflush(stderr);
}

}  // namespace cubed::cubectl
