#pragma once

// Conformance suite for ComputeStorage implementations (CONVENTIONS.md §12). A backend
// instantiates it in a few lines:
//   INSTANTIATE_TEST_SUITE_P(Cuda, ComputeStorageConformance,
//       testing::Values(ComputeStorageFactory{"cuda", [] { return MakeCudaStorage(); }}),
//       ComputeStorageFactoryName);
// and adds compute_storage_conformance.cc to its test executable.

#include <functional>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "storage/compute_storage.h"

namespace cubed {

// Makes a fresh storage for one test; the shared_ptr owns whatever the storage stacks on.
struct ComputeStorageFactory {
  std::string name;
  std::function<std::shared_ptr<ComputeStorage>()> make;
};

// Test-name generator for INSTANTIATE_TEST_SUITE_P.
std::string ComputeStorageFactoryName(const testing::TestParamInfo<ComputeStorageFactory>& info);

class ComputeStorageConformance : public testing::TestWithParam<ComputeStorageFactory> {
 protected:
  void SetUp() override { storage_ = GetParam().make(); }
  std::shared_ptr<ComputeStorage> storage_;
};

}  // namespace cubed
