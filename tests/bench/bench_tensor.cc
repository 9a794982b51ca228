// Helpers shared by the measurements (bench_measure.h).
#include <cstring>

#include "absl/strings/str_format.h"
#include "tests/bench/bench_measure.h"

namespace cubed::bench {

float PatternValue(uint64_t i) { return 0.25f + static_cast<float>(i % 97) / 64; }

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string IssueBoundNote(const Profiled& p, int count) {
  if (p.issue_s < 0.7 * p.device_s) return "";
  return absl::StrFormat(
      "; WARNING issue-bound: client issues %.0f us/command vs %.0f us/kernel on the device, so "
      "idle gaps count as kernel time (use bigger sizes)",
      p.issue_s / count * 1e6, p.device_s / count * 1e6);
}

absl::StatusOr<Tensor> CreatePatternTensor(Client& client, std::vector<uint64_t> shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  std::vector<uint8_t> bytes(n * sizeof(float));
  for (uint64_t i = 0; i < n; ++i) {
    const float v = PatternValue(i);
    std::memcpy(bytes.data() + i * sizeof(float), &v, sizeof(float));
  }
  return client.CreateTensor(bytes, std::move(shape), sizeof(float));
}

}  // namespace cubed::bench
