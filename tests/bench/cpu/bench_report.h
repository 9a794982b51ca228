#pragma once

// The cubed-bench files name the shared report types (tests/bench/bench_report.h) from their own
// namespace, cubed::cpubench; this header only brings them in.

#include "tests/bench/bench_report.h"

namespace cubed::cpubench {

using bench::PrintTable;
using bench::Row;
using bench::Summarize;
using bench::Summary;
using bench::ToJson;

}  // namespace cubed::cpubench
