#pragma once

// TraceRecorder: the commands one session ran on its device's loop while a traced profile was
// open (StartProfile with trace_events > 0), as timeline events for a trace viewer. See
// Note [Command traces] in trace_recorder.cc.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace cubed {

// One command as the loop ran it. Host times (the loop's clock, Unix epoch nanoseconds): from the
// loop starting the command to it returning (a launch or a queued copy: not its device time).
struct TraceEvent {
  std::string name;      // "add" (a builtin), a CUDA entry point, "create", "read", "sync"...
  std::string category;  // "kernel", "memory", "transfer" or "sync".
  int64_t start_unix_ns = 0;
  int64_t duration_ns = 0;
  uint64_t bytes = 0;  // Bytes created, read or written; 0 where none move.
};

// Owned by one Session; used on the loop thread only. Holds at most `max_events` events and
// counts the ones past that as dropped, so a trace is bounded in memory whatever runs.
class TraceRecorder {
 public:
  explicit TraceRecorder(uint32_t max_events) : max_events_(max_events) {}

  void Record(TraceEvent event);

  // The events so far, in the order the loop ran them, and how many did not fit.
  const std::vector<TraceEvent>& events() const { return events_; }
  uint64_t dropped() const { return dropped_; }

 private:
  uint32_t max_events_;
  std::vector<TraceEvent> events_;
  uint64_t dropped_ = 0;
};

// Records one event into `recorder` (nothing when it is null) when it goes out of scope, timed
// from its construction.
class ScopedTraceEvent {
 public:
  ScopedTraceEvent(TraceRecorder* recorder, const char* category);
  ~ScopedTraceEvent();
  ScopedTraceEvent(const ScopedTraceEvent&) = delete;
  ScopedTraceEvent& operator=(const ScopedTraceEvent&) = delete;

  // What the event says; cheap no-ops without a recorder.
  void set_name(absl::string_view name) {
    if (recorder_ != nullptr) event_.name.assign(name.data(), name.size());
  }
  void set_bytes(uint64_t bytes) { event_.bytes = bytes; }

 private:
  TraceRecorder* recorder_;
  TraceEvent event_;
};

}  // namespace cubed
