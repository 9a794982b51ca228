#include "tests/bench/bench_stats.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cubed::bench {
namespace {

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string JsonSummary(const Summary& s) {
  return absl::StrFormat("{\"median\": %.6g, \"min\": %.6g, \"max\": %.6g, \"count\": %d}", s.median,
                         s.min, s.max, s.count);
}

std::string Cell(const Summary& s) {
  if (s.count == 0) return "-";
  return absl::StrFormat("%.4g [%.4g..%.4g]", s.median, s.min, s.max);
}

}  // namespace

Summary Summarize(std::vector<double> samples) {
  Summary s;
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  s.median = n % 2 == 1 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
  s.min = samples.front();
  s.max = samples.back();
  s.count = static_cast<int>(n);
  return s;
}

double Row::Ratio() const {
  if (baseline.count == 0 || baseline.median == 0) return 0;
  return figure.median / baseline.median;
}

void PrintTable(const std::string& title, const std::vector<Row>& rows) {
  std::printf("\n%s\n", title.c_str());
  std::printf("%-4s %-48s %-8s %-32s %-38s %-32s %-8s %s\n", "id", "figure", "unit",
              "median [min..max]", "baseline", "median [min..max]", "ratio", "goal");
  for (const Row& r : rows) {
    const std::string ratio = r.baseline.count > 0 ? absl::StrFormat("%.3fx", r.Ratio()) : "-";
    std::printf("%-4s %-48s %-8s %-32s %-38s %-32s %-8s %s\n", r.id.c_str(), r.name.c_str(),
                r.unit.c_str(), Cell(r.figure).c_str(),
                r.baseline_name.empty() ? "-" : r.baseline_name.c_str(), Cell(r.baseline).c_str(),
                ratio.c_str(), r.goal.c_str());
    if (!r.note.empty()) std::printf("     note: %s\n", r.note.c_str());
  }
  std::fflush(stdout);
}

std::string ToJson(const std::vector<std::pair<std::string, std::string>>& context,
                   const std::vector<Row>& rows) {
  std::string out = "{\n  \"context\": {";
  for (size_t i = 0; i < context.size(); ++i) {
    absl::StrAppend(&out, i ? ", " : "", JsonString(context[i].first), ": ",
                    JsonString(context[i].second));
  }
  out += "},\n  \"rows\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    absl::StrAppend(&out, i ? "," : "", "\n    {\"id\": ", JsonString(r.id),
                    ", \"name\": ", JsonString(r.name), ", \"unit\": ", JsonString(r.unit),
                    ", \"figure\": ", JsonSummary(r.figure),
                    ", \"baseline_name\": ", JsonString(r.baseline_name),
                    ", \"baseline\": ", JsonSummary(r.baseline),
                    ", \"ratio\": ", absl::StrFormat("%.6g", r.Ratio()),
                    ", \"goal\": ", JsonString(r.goal), ", \"note\": ", JsonString(r.note), "}");
  }
  out += "\n  ]\n}\n";
  return out;
}

}  // namespace cubed::bench
