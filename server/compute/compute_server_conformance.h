#pragma once

// Conformance suite for ComputeServer backends (CONVENTIONS.md §12), in process and typed, so
// that a failure names the operation rather than a daemon-level symptom. A backend instantiates
// it in a few lines:
//   INSTANTIATE_TEST_SUITE_P(Cpu, ComputeServerConformance,
//       testing::Values(ComputeServerFactory{"cpu", [] { return MakeCpu(); }}),
//       ComputeServerFactoryName);
// and adds compute_server_conformance.cc to its test executable. A factory that returns null
// (no device here) skips every test with the reason it sets.

#include <functional>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "server/compute/compute_server.h"

namespace cubed {

// Makes a fresh backend with at least 64 MiB of memory for one test; null (and `skip` set) when
// the backend cannot run here.
struct ComputeServerFactory {
  std::string name;
  std::function<std::unique_ptr<ComputeServer>(std::string* skip)> make;
};

// Test-name generator for INSTANTIATE_TEST_SUITE_P.
std::string ComputeServerFactoryName(const testing::TestParamInfo<ComputeServerFactory>& info);

class ComputeServerConformance : public testing::TestWithParam<ComputeServerFactory> {
 protected:
  void SetUp() override;
  void TearDown() override;
  std::unique_ptr<ComputeServer> server_;
};

}  // namespace cubed
