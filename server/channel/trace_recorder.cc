#include "server/channel/trace_recorder.h"

#include <utility>

#include "absl/time/clock.h"

namespace cubed {

// Note [Command traces]
// A traced profile (StartProfile with trace_events = N > 0) gives its session a TraceRecorder;
// while it is open, the Device methods that run a client's commands (Execute, the creates and
// empties, the reads, Release, Flush, Sync) record one event each on the loop thread: the
// command's name and category, when the loop started it and how long the loop spent on it, and
// the bytes it moved. EndProfile hands the events back with the profile's device time
// (EndProfileResponse.trace), and the SDKs write them as Chrome trace-event JSON (Perfetto,
// chrome://tracing). The times are the loop's, so a launch shows its host cost and a read the
// queueing of its copy; the device time of each kernel is not recorded yet (the profile's total
// is). At most N events are kept (N at most 1,000,000); later ones are counted as dropped.

void TraceRecorder::Record(TraceEvent event) {
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  events_.push_back(std::move(event));
}

ScopedTraceEvent::ScopedTraceEvent(TraceRecorder* recorder, const char* category)
    : recorder_(recorder) {
  if (recorder_ != nullptr) {
    event_.category = category;
    event_.start_unix_ns = absl::GetCurrentTimeNanos();
  }
}

ScopedTraceEvent::~ScopedTraceEvent() {
  if (recorder_ == nullptr) return;
  event_.duration_ns = absl::GetCurrentTimeNanos() - event_.start_unix_ns;
  recorder_->Record(std::move(event_));
}

}  // namespace cubed
