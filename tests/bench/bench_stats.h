#pragma once

// Samples, summaries and the result rows cubed_gpu_bench prints and writes as JSON. Every row is
// a figure and a baseline measured in the same run; the ratio is figure median / baseline median
// (higher is better for every figure here).

#include <string>
#include <vector>

namespace cubed::bench {

// Median and spread of repeated measurements of one quantity.
struct Summary {
  double median = 0;
  double min = 0;
  double max = 0;
  int count = 0;
};

// Summarizes `samples` (empty gives all zeros).
Summary Summarize(std::vector<double> samples);

// One line of the table: a figure with its baseline.
struct Row {
  std::string id;             // e.g. "P7".
  std::string name;           // What was measured through the daemon.
  std::string unit;           // Unit of figure and baseline, e.g. "GB/s".
  Summary figure;
  std::string baseline_name;  // What the baseline is; empty when there is none.
  Summary baseline;
  std::string goal;           // e.g. ">= 0.85x".
  std::string note;           // Anything the reader must know (e.g. "cuBLAS not available").

  // figure.median / baseline.median; 0 without a baseline.
  double Ratio() const;
};

// Prints the rows as an aligned table to stdout.
void PrintTable(const std::string& title, const std::vector<Row>& rows);

// The rows as a JSON document with the run's `context` (flat string pairs, e.g. device, backend).
std::string ToJson(const std::vector<std::pair<std::string, std::string>>& context,
                   const std::vector<Row>& rows);

}  // namespace cubed::bench
