#pragma once

// Summaries of repeated measurements and the rows cubed-bench prints as a table and writes as
// JSON. Every row is a figure and, where there is one, a baseline measured in the same run.

#include <string>
#include <utility>
#include <vector>

namespace cubed::cpubench {

// Median, tail and range of repeated measurements of one quantity.
struct Summary {
  double p50 = 0;
  double p99 = 0;
  double min = 0;
  double max = 0;
  int count = 0;
};

// Summarizes `samples` (nearest-rank percentiles; empty gives all zeros).
Summary Summarize(std::vector<double> samples);

// One line of the table.
struct Row {
  std::string id;     // e.g. "P1".
  std::string name;   // What was measured through cubed.
  std::string unit;   // Unit of figure and baseline, e.g. "us".
  bool lower_is_better = true;
  bool show_p99 = false;     // Latency rows: print p99 next to p50.
  Summary figure;
  std::string baseline_name;  // Empty when there is no baseline.
  Summary baseline;
  std::string goal;      // Human form, e.g. "<= 1.2x".
  bool goal_met = false;
  std::string verdict;   // "met", "missed by 1.4x", ...
  std::string note;

  // figure.p50 / baseline.p50; 0 without a baseline.
  double Ratio() const;
};

// Prints the rows as an aligned table to stdout.
void PrintTable(const std::vector<Row>& rows);

// The rows as a JSON document with the run's `context` (flat string pairs).
std::string ToJson(const std::vector<std::pair<std::string, std::string>>& context,
                   const std::vector<Row>& rows);

}  // namespace cubed::cpubench
