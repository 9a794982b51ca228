#include "tests/bench/bench_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cubed::bench {
namespace {

double Rank(const std::vector<double>& sorted, double q) {
  size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  i = std::clamp<size_t>(i, 1, sorted.size());
  return sorted[i - 1];
}

// Four significant digits, no exponent for large values.
std::string Num(double v) {
  if (v == 0) return "0";
  if (std::fabs(v) >= 1000) return absl::StrFormat("%.0f", v);
  return absl::StrFormat("%.4g", v);
}

std::string Cell(const Summary& s, bool p99) {
  if (s.count == 0) return "-";
  std::string out = Num(s.p50);
  if (p99) absl::StrAppend(&out, " p99 ", Num(s.p99));
  absl::StrAppend(&out, " [", Num(s.min), "..", Num(s.max), "]");
  return out;
}

std::string Quote(const std::string& s) {
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

std::string SummaryJson(const Summary& s) {
  return absl::StrFormat(R"({"p50": %.6g, "p99": %.6g, "min": %.6g, "max": %.6g, "count": %d})",
                         s.p50, s.p99, s.min, s.max, s.count);
}

}  // namespace

Summary Summarize(std::vector<double> samples) {
  Summary s;
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  s.p50 = n % 2 == 1 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
  s.p99 = Rank(samples, 0.99);
  s.min = samples.front();
  s.max = samples.back();
  s.count = static_cast<int>(n);
  return s;
}

double Row::Ratio() const {
  if (baseline.count == 0 || baseline.p50 == 0) return 0;
  return figure.p50 / baseline.p50;
}

void PrintTable(const std::string& title, const std::vector<Row>& rows) {
  if (!title.empty()) std::printf("\n%s\n", title.c_str());
  const bool verdicts =
      std::any_of(rows.begin(), rows.end(), [](const Row& r) { return !r.verdict.empty(); });
  std::vector<std::vector<std::string>> cells;
  cells.push_back({"id", "figure", "unit", "cubed p50 [min..max]", "baseline",
                   "baseline p50 [min..max]", "ratio", "goal"});
  if (verdicts) cells[0].push_back("verdict");
  for (const Row& r : rows) {
    cells.push_back({r.id, r.name, r.unit, Cell(r.figure, r.show_p99),
                     r.baseline_name.empty() ? "-" : r.baseline_name, Cell(r.baseline, r.show_p99),
                     r.Ratio() == 0 ? "-" : absl::StrFormat("%.3fx", r.Ratio()), r.goal});
    if (verdicts) cells.back().push_back(r.verdict);
  }
  std::vector<size_t> width(cells[0].size(), 0);
  for (const auto& line : cells) {
    for (size_t i = 0; i < line.size(); ++i) width[i] = std::max(width[i], line[i].size());
  }
  for (size_t n = 0; n < cells.size(); ++n) {
    std::string line;
    for (size_t i = 0; i < cells[n].size(); ++i) {
      absl::StrAppend(&line, i ? " | " : "", cells[n][i],
                      std::string(width[i] - cells[n][i].size(), ' '));
    }
    std::printf("%s\n", line.c_str());
    if (n == 0) {
      std::string rule;
      for (size_t i = 0; i < width.size(); ++i) {
        absl::StrAppend(&rule, i ? "-+-" : "", std::string(width[i], '-'));
      }
      std::printf("%s\n", rule.c_str());
    }
  }
  for (const Row& r : rows) {
    if (!r.note.empty()) std::printf("  %s %s: %s\n", r.id.c_str(), r.name.c_str(), r.note.c_str());
  }
  std::fflush(stdout);
}

std::string ToJson(const std::vector<std::pair<std::string, std::string>>& context,
                   const std::vector<Row>& rows) {
  std::string out = "{\n  \"context\": {";
  for (size_t i = 0; i < context.size(); ++i) {
    absl::StrAppend(&out, i ? ", " : "", Quote(context[i].first), ": ", Quote(context[i].second));
  }
  absl::StrAppend(&out, "},\n  \"rows\": [");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const char* met = r.verdict.empty() ? "null" : (r.goal_met ? "true" : "false");
    absl::StrAppend(&out, i ? "," : "", "\n    {\"id\": ", Quote(r.id),
                    ", \"name\": ", Quote(r.name), ", \"unit\": ", Quote(r.unit),
                    ", \"lower_is_better\": ", r.lower_is_better ? "true" : "false",
                    ", \"figure\": ", SummaryJson(r.figure),
                    ", \"baseline_name\": ", Quote(r.baseline_name),
                    ", \"baseline\": ", SummaryJson(r.baseline),
                    absl::StrFormat(", \"ratio\": %.6g", r.Ratio()), ", \"goal\": ", Quote(r.goal),
                    ", \"goal_met\": ", met, ", \"verdict\": ", Quote(r.verdict),
                    ", \"note\": ", Quote(r.note), "}");
  }
  absl::StrAppend(&out, "\n  ]\n}\n");
  return out;
}

}  // namespace cubed::bench
