#include "client/trace_json.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cubed {
namespace {

// Microseconds with the nanoseconds kept, as the format's "ts" and "dur" are.
std::string Micros(int64_t ns) {
  return absl::StrCat(ns / 1000, ".", absl::Dec(ns % 1000, absl::kZeroPad3));
}

}  // namespace

std::string JsonQuote(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out.push_back(c);
        }
    }
  }
  out += "\"";
  return out;
}

std::string ChromeTraceJson(const v1::Trace& trace, uint64_t session, uint64_t device_time_ns) {
  const int64_t origin = trace.events().empty() ? 0 : trace.events(0).start_unix_ns();
  const uint32_t pid = trace.device();
  const uint64_t tid = session & 0x7fffffff;  // Viewers want small integers.
  std::string out = absl::StrCat(
      "{\"traceEvents\":[{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":", pid, ",\"tid\":", tid,
      ",\"args\":{\"name\":\"cubed device ", pid,
      "\"}},{\"name\":\"thread_name\",\"ph\":\"M\","
      "\"pid\":",
      pid, ",\"tid\":", tid, ",\"args\":{\"name\":\"session ", session,
      " (device loop)\"}},{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":", pid,
      ",\"tid\":", tid + 1, ",\"args\":{\"name\":\"session ", session, " (device)\"}}");
  for (const v1::TraceEvent& e : trace.events()) {
    const int64_t ts = e.start_unix_ns() - origin;
    absl::StrAppend(&out, ",{\"name\":", JsonQuote(e.name()), ",\"cat\":", JsonQuote(e.category()),
                    ",\"ph\":\"X\",\"ts\":", ts < 0 ? "0" : Micros(ts),
                    ",\"dur\":", Micros(std::max<int64_t>(e.duration_ns(), 0)), ",\"pid\":", pid,
                    ",\"tid\":", tid, ",\"args\":{");
    if (e.bytes() != 0) absl::StrAppend(&out, "\"bytes\":", e.bytes());
    if (e.queued_ns() != 0) {  // The wait between arrival and start, in the event's arguments.
      absl::StrAppend(&out, e.bytes() != 0 ? "," : "", "\"queued_us\":", Micros(e.queued_ns()));
    }
    absl::StrAppend(&out, "}}");
    if (e.device_start_unix_ns() != 0) {  // The kernel's run on the device, a thread of its own.
      const int64_t dts = e.device_start_unix_ns() - origin;
      absl::StrAppend(&out, ",{\"name\":", JsonQuote(e.name()),
                      ",\"cat\":\"device\",\"ph\":\"X\",\"ts\":", dts < 0 ? "0" : Micros(dts),
                      ",\"dur\":", Micros(std::max<int64_t>(e.device_duration_ns(), 0)),
                      ",\"pid\":", pid, ",\"tid\":", tid + 1, ",\"args\":{}}");
    }
  }
  absl::StrAppend(&out, "],\"displayTimeUnit\":\"ms\",\"otherData\":{\"session\":\"", session,
                  "\",\"device\":", pid, ",\"start_unix_ns\":\"", origin,
                  "\",\"dropped\":", trace.dropped(), ",\"device_time_ns\":", device_time_ns,
                  "}}\n");
  return out;
}

}  // namespace cubed
