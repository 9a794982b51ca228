#pragma once

// Helpers for the CUDA backend's tests: every test that needs a GPU skips cleanly without one.

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/compute/compute_server.h"
#include "server/compute/cuda/cuda_server.h"

namespace cubed::testing_cuda {

// True when the CUDA driver loads and sees at least one device; otherwise `why` says why.
bool CudaDevicePresent(std::string* why = nullptr);

// Skips the current test when no CUDA device is present.
#define CUBED_SKIP_WITHOUT_CUDA()                                 \
  do {                                                            \
    std::string cubed_why_;                                       \
    if (!::cubed::testing_cuda::CudaDevicePresent(&cubed_why_)) { \
      GTEST_SKIP() << "no CUDA device here: " << cubed_why_;      \
    }                                                             \
  } while (false)

// The memory owner (a session's tag) that tests allocate for unless they need several.
inline constexpr MemoryOwner kTestOwner = kFirstSessionOwner;

// A CudaServer on device 0 (fails the test if it cannot be made).
std::unique_ptr<CudaServer> MakeCudaServer(uint64_t memory_limit = uint64_t{2} << 30);

// Synchronous forms of the callback methods.
absl::StatusOr<std::vector<std::string>> ReadAll(ComputeServer& server,
                                                 std::vector<ResolvedBinding> bindings);
absl::StatusOr<std::vector<std::string>> ReadTensors(ComputeServer& server,
                                                     std::vector<ResolvedTensor> tensors);
absl::Status SyncNow(ComputeServer& server);
absl::StatusOr<absl::Duration> EndProfileNow(ComputeServer& server, ProfileToken token);

// `count` random bytes from a fixed seed.
std::string RandomBytes(size_t count, uint32_t seed);

}  // namespace cubed::testing_cuda
