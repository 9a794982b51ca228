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
  // A kernel's run on the device (backends with a device clock, CUDA): Unix epoch nanoseconds,
  // placed by the profile's start; 0 and 0 where not measured.
  int64_t device_start_unix_ns = 0;
  int64_t device_duration_ns = 0;
  // Session-stream commands: from the command's arrival to start_unix_ns; 0 where none was noted
  // (unary calls).
  int64_t queued_ns = 0;
  // The ComputeServer::DeviceMark ids around the launch (0: none).
  uint64_t mark_begin = 0, mark_end = 0;
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
  // Whether the next event would be dropped (so it takes no device marks).
  bool full() const { return events_.size() >= max_events_; }

  // The device mark taken when the profile started (0: the backend has no device clock, and no
  // event takes marks) and the host time then, which places the device's times.
  void set_base(uint64_t mark, int64_t unix_ns) {
    base_mark_ = mark;
    base_unix_ns_ = unix_ns;
  }
  bool has_device_clock() const { return base_mark_ != 0; }
  // The arrival (Unix epoch nanoseconds) of the command whose event is recorded next, which then
  // gets its queued_ns.
  void set_arrival(int64_t unix_ns) { arrival_unix_ns_ = unix_ns; }
  // Every mark to time, the base first; then SetDeviceTimes with their offsets from it (as
  // ComputeServer::TimeMarks gives them) fills each event's device times.
  std::vector<uint64_t> Marks() const;
  void SetDeviceTimes(const std::vector<int64_t>& offsets_ns);

 private:
  uint64_t base_mark_ = 0;
  int64_t arrival_unix_ns_ = 0;
  int64_t base_unix_ns_ = 0;
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
  void set_marks(uint64_t begin, uint64_t end) {
    event_.mark_begin = begin;
    event_.mark_end = end;
  }

 private:
  TraceRecorder* recorder_;
  TraceEvent event_;
};

}  // namespace cubed
