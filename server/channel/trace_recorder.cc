#include "server/channel/trace_recorder.h"

#include <algorithm>
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
// queueing of its copy. On a backend with a device clock (CUDA) each launch also takes two
// device marks (ComputeServer::DeviceMark: events on the stream) and the profile one at its
// start; EndProfile times them (TimeMarks) before it answers, so a kernel event also carries its
// run on the device, placed on the host's clock by the profile's start (the SDKs' traces show it
// as a second, "device" thread). At most N events are kept (N at most 1,000,000); later ones are
// counted as dropped.

void TraceRecorder::Record(TraceEvent event) {
  if (arrival_unix_ns_ != 0) {
    event.queued_ns = std::max<int64_t>(event.start_unix_ns - arrival_unix_ns_, 0);
    arrival_unix_ns_ = 0;
  }
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  events_.push_back(std::move(event));
}

std::vector<uint64_t> TraceRecorder::Marks() const {
  std::vector<uint64_t> marks;
  if (base_mark_ == 0) return marks;
  marks.push_back(base_mark_);
  for (const TraceEvent& e : events_) {
    if (e.mark_begin == 0 || e.mark_end == 0) continue;
    marks.push_back(e.mark_begin);
    marks.push_back(e.mark_end);
  }
  return marks;
}

void TraceRecorder::SetDeviceTimes(const std::vector<int64_t>& offsets_ns) {
  size_t i = 1;  // offsets_ns[0] is the base's own: 0.
  for (TraceEvent& e : events_) {
    if (e.mark_begin == 0 || e.mark_end == 0) continue;
    if (i + 1 >= offsets_ns.size()) break;
    e.device_start_unix_ns = base_unix_ns_ + offsets_ns[i];
    e.device_duration_ns = std::max<int64_t>(offsets_ns[i + 1] - offsets_ns[i], 0);
    i += 2;
  }
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
