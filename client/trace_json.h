#pragma once

// Chrome trace-event JSON (the format Perfetto's UI and chrome://tracing open) of a traced
// profile (Client::EndTrace, docs/operations.md "Traces"). Pure; any thread. The Python SDK's
// Trace.chrome() writes the same layout.

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "cubed/v1/compute.pb.h"

namespace cubed {

// The JSON object form: metadata naming the device (process) and the session's two threads
// (its device loop; its kernels' runs on the device where measured), then one complete event
// ("ph": "X", "ts" and "dur" in microseconds from the first command) per command and per kernel
// run, and "otherData" with the session, device, absolute start, dropped events and the
// profile's device time. Ends with a newline.
std::string ChromeTraceJson(const v1::Trace& trace, uint64_t session, uint64_t device_time_ns);

// `s` as a JSON string literal, quotes included (control characters escaped).
std::string JsonQuote(absl::string_view s);

}  // namespace cubed
