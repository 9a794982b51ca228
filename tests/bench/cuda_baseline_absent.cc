// Built when the toolkit's cuda.h is missing: no CUDA baselines.
#include "absl/status/status.h"
#include "tests/bench/cuda_baseline.h"

namespace cubed::bench {

absl::StatusOr<std::unique_ptr<CudaBaseline>> CudaBaseline::Open(int) {
  return absl::UnimplementedError("cubed_gpu_bench was built without cuda.h: no CUDA baselines");
}

}  // namespace cubed::bench
