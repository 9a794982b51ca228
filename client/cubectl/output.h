#pragma once

// What a command prints: a list of fields, shown as an aligned two-column table for people or,
// with --json, as one JSON object on one line for scripts.

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/trace_json.h"

namespace cubed::cubectl {

// One row of a report: its key, its text for the table and its JSON value.
struct Field {
  std::string key;
  std::string text;
  std::string json;
  std::string json_key;  // Key in JSON when it differs from `key`.
};

Field TextField(absl::string_view key, absl::string_view value);
Field NumberField(absl::string_view key, uint64_t value);
// A 64-bit id (session, handle): decimal; a JSON string, as protobuf's JSON mapping writes uint64,
// so that scripts in languages with 53-bit numbers keep every digit.
Field IdField(absl::string_view key, uint64_t id);
// Table: "1.50 MiB (1572864 bytes)"; JSON: the exact number of bytes.
Field SizeField(absl::string_view key, uint64_t bytes);
// Table: "1.234 ms"; JSON: nanoseconds, under `key` + "_ns".
Field DurationField(absl::string_view key, absl::Duration d);
// Table: the values joined by ", " ("-" when empty); JSON: an array of strings.
Field ListField(absl::string_view key, const std::vector<std::string>& values);
// Table: "2x3" style; JSON: an array of numbers.
Field ShapeField(absl::string_view key, const std::vector<uint64_t>& values);
// Table: `text`; JSON: `json` as given (already valid JSON).
Field RawField(absl::string_view key, std::string text, std::string json);

// "1.50 MiB", "512 B".
std::string HumanSize(uint64_t bytes);
// `s` as a JSON string literal, quotes included (the client library's, client/trace_json.h).
using ::cubed::JsonQuote;

// Prints the fields as a table, or as one JSON object line when `json`.
void PrintReport(const std::vector<Field>& fields, bool json, std::ostream& out);

}  // namespace cubed::cubectl
