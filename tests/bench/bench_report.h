#pragma once

// Summaries of repeated measurements and the result rows both benchmark programs (cubed_gpu_bench,
// cubed-bench) print as a table and write as JSON. Every row is a figure and, where there is one,
// a baseline measured in the same run; the ratio is figure p50 / baseline p50.
// Plain functions and values; no threads, no state.

#include <string>
#include <utility>
#include <vector>

namespace cubed::bench {

// Median, tail and range of repeated measurements of one quantity.
struct Summary {
  double p50 = 0;  // Median (mean of the middle two for an even count).
  double p99 = 0;  // Nearest-rank 99th percentile.
  double min = 0;
  double max = 0;
  int count = 0;
};

// Summarizes `samples` (empty gives all zeros).
Summary Summarize(std::vector<double> samples);

// One line of the table.
struct Row {
  std::string id;    // e.g. "P1".
  std::string name;  // What was measured through cubed.
  std::string unit;  // Unit of figure and baseline, e.g. "us", "GB/s".
  bool lower_is_better = false;
  bool show_p99 = false;  // Latency rows: print p99 next to p50.
  Summary figure;
  std::string baseline_name;  // Empty when there is no baseline.
  Summary baseline;
  std::string goal;       // Human form, e.g. "<= 1.2x", ">= 0.85x".
  bool goal_met = false;  // Meaningful only with a verdict.
  std::string verdict;    // "met", "missed (...)"; empty: the program does not judge the row.
  std::string note;       // Anything the reader must know.

  // figure.p50 / baseline.p50; 0 without a baseline.
  double Ratio() const;
};

// Prints `title` (when not empty) and the rows as an aligned table, then the rows' notes, to
// stdout. The verdict column appears when some row has a verdict.
void PrintTable(const std::string& title, const std::vector<Row>& rows);

// The rows as a JSON document with the run's `context` (flat string pairs, e.g. backend, date).
// "goal_met" is null for rows without a verdict.
std::string ToJson(const std::vector<std::pair<std::string, std::string>>& context,
                   const std::vector<Row>& rows);

}  // namespace cubed::bench
