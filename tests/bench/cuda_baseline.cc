#include "tests/bench/cuda_baseline.h"

#include <chrono>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/cuda/cuda_driver.h"
#include "common/status_macros.h"
#include "tests/bench/cublas_loader.h"

namespace cubed::bench {
namespace {

// An empty kernel; the driver JIT-compiles it for the device.
constexpr char kEmptyPtx[] = R"(.version 7.0
.target sm_80
.address_size 64
.visible .entry cubed_bench_empty()
{
  ret;
}
.visible .entry cubed_bench_empty_args(.param .align 8 .b8 args[640])
{
  ret;
}
)";

// Device memory freed on scope exit.
struct DeviceBuffer {
  CUdeviceptr ptr = 0;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr != 0) Cu().MemFree(ptr);
  }
};

// Pinned host memory freed on scope exit.
struct PinnedBuffer {
  void* ptr = nullptr;
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (ptr != nullptr) Cu().MemFreeHost(ptr);
  }
};

// Fills `bytes` with a non-zero float pattern.
void FillPattern(void* data, uint64_t bytes) {
  float* f = static_cast<float*>(data);
  for (uint64_t i = 0; i < bytes / sizeof(float); ++i)
    f[i] = 0.25f + static_cast<float>(i % 97) / 64;
}

class CudaBaselineImpl final : public CudaBaseline {
 public:
  ~CudaBaselineImpl() override {
    if (module_ != nullptr) Cu().ModuleUnload(module_);
    if (start_ != nullptr) Cu().EventDestroy(start_);
    if (stop_ != nullptr) Cu().EventDestroy(stop_);
    if (stream_ != nullptr) Cu().StreamDestroy(stream_);
    if (context_ != nullptr) Cu().DevicePrimaryCtxRelease(device_);
  }

  absl::Status Init(int ordinal) {
    ASSIGN_OR_RETURN(const CudaDriver* driver, LoadCudaDriver());
    (void)driver;
    ASSIGN_OR_RETURN(device_, CudaDeviceForOrdinal(ordinal));
    CU_RETURN_IF_ERROR(Cu().DevicePrimaryCtxRetain(&context_, device_));
    CU_RETURN_IF_ERROR(Cu().CtxSetCurrent(context_));
    CU_RETURN_IF_ERROR(Cu().StreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
    CU_RETURN_IF_ERROR(Cu().EventCreate(&start_, CU_EVENT_DEFAULT));
    CU_RETURN_IF_ERROR(Cu().EventCreate(&stop_, CU_EVENT_DEFAULT));
    char name[256] = {};
    CU_RETURN_IF_ERROR(Cu().DeviceGetName(name, sizeof(name) - 1, device_));
    describe_ = absl::StrCat(name, " (driver ", Cu().version, ")");
    return absl::OkStatus();
  }

  std::string Describe() const override { return describe_; }

  absl::StatusOr<std::vector<double>> CopyDtoDSeconds(uint64_t bytes, int iters,
                                                      int repeats) override {
    DeviceBuffer src, dst;
    CU_RETURN_IF_ERROR(Cu().MemAlloc(&src.ptr, bytes));
    CU_RETURN_IF_ERROR(Cu().MemAlloc(&dst.ptr, bytes));
    RETURN_IF_ERROR(Upload(src.ptr, bytes));
    for (int i = 0; i < 3; ++i)
      CU_RETURN_IF_ERROR(Cu().MemcpyDtoDAsync(dst.ptr, src.ptr, bytes, stream_));
    std::vector<double> samples;
    for (int r = 0; r < repeats; ++r) {
      CU_RETURN_IF_ERROR(Cu().EventRecord(start_, stream_));
      for (int i = 0; i < iters; ++i)
        CU_RETURN_IF_ERROR(Cu().MemcpyDtoDAsync(dst.ptr, src.ptr, bytes, stream_));
      ASSIGN_OR_RETURN(double seconds, StopSeconds());
      samples.push_back(seconds / iters);
    }
    return samples;
  }

  absl::StatusOr<std::vector<double>> PinnedRoundTripSeconds(uint64_t bytes, int repeats) override {
    PinnedBuffer up, down;
    DeviceBuffer dev;
    CU_RETURN_IF_ERROR(Cu().MemHostAlloc(&up.ptr, bytes, 0));
    CU_RETURN_IF_ERROR(Cu().MemHostAlloc(&down.ptr, bytes, 0));
    CU_RETURN_IF_ERROR(Cu().MemAlloc(&dev.ptr, bytes));
    FillPattern(up.ptr, bytes);
    std::memset(down.ptr, 1, bytes);
    std::vector<double> samples;
    for (int r = -1; r < repeats; ++r) {  // r = -1: warm-up.
      CU_RETURN_IF_ERROR(Cu().EventRecord(start_, stream_));
      CU_RETURN_IF_ERROR(Cu().MemcpyHtoDAsync(dev.ptr, up.ptr, bytes, stream_));
      CU_RETURN_IF_ERROR(Cu().MemcpyDtoHAsync(down.ptr, dev.ptr, bytes, stream_));
      ASSIGN_OR_RETURN(double seconds, StopSeconds());
      if (r >= 0) samples.push_back(seconds);
    }
    if (std::memcmp(up.ptr, down.ptr, bytes) != 0) {
      return absl::InternalError("pinned round trip returned different bytes");
    }
    return samples;
  }

  absl::StatusOr<std::vector<double>> EmptyLaunchRate(int launches, int repeats,
                                                      bool like_builtin) override {
    if (module_ == nullptr) {
      CU_RETURN_IF_ERROR(Cu().ModuleLoadData(&module_, kEmptyPtx));
      CU_RETURN_IF_ERROR(Cu().ModuleGetFunction(&empty_, module_, "cubed_bench_empty"));
      CU_RETURN_IF_ERROR(Cu().ModuleGetFunction(&empty_args_, module_, "cubed_bench_empty_args"));
    }
    alignas(8) unsigned char args[640] = {};
    void* params[] = {args};
    std::vector<double> samples;
    for (int r = -1; r < repeats; ++r) {  // r = -1: warm-up.
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < launches; ++i) {
        CU_RETURN_IF_ERROR(
            like_builtin
                ? Cu().LaunchKernel(empty_args_, 1, 1, 1, 256, 1, 1, 0, stream_, params, nullptr)
                : Cu().LaunchKernel(empty_, 1, 1, 1, 1, 1, 1, 0, stream_, nullptr, nullptr));
      }
      CU_RETURN_IF_ERROR(Cu().StreamSynchronize(stream_));
      const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
      if (r >= 0) samples.push_back(launches / dt.count());
    }
    return samples;
  }

  absl::StatusOr<std::vector<double>> GraphNodeRate(int nodes, int replays, int repeats) override {
    if (Cu().StreamBeginCapture == nullptr) {
      return absl::UnimplementedError("the driver has no CUDA graph entry points");
    }
    RETURN_IF_ERROR(EmptyLaunchRate(1, 1, true).status());  // Loads the module.
    alignas(8) unsigned char args[640] = {};
    void* params[] = {args};
    CU_RETURN_IF_ERROR(Cu().StreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CUresult launched = CUDA_SUCCESS;
    for (int i = 0; i < nodes && launched == CUDA_SUCCESS; ++i) {
      launched = Cu().LaunchKernel(empty_args_, 1, 1, 1, 256, 1, 1, 0, stream_, params, nullptr);
    }
    CUgraph graph = nullptr;
    const CUresult ended = Cu().StreamEndCapture(stream_, &graph);
    CU_RETURN_IF_ERROR(launched);
    CU_RETURN_IF_ERROR(ended);
    CUgraphExec exec = nullptr;
    const CUresult instantiated = Cu().GraphInstantiate(&exec, graph, 0);
    Cu().GraphDestroy(graph);
    CU_RETURN_IF_ERROR(instantiated);
    std::vector<double> samples;
    absl::Status status;
    for (int r = -1; r < repeats && status.ok(); ++r) {  // r = -1: warm-up.
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < replays && status.ok(); ++i) {
        status = CU_STATUS(Cu().GraphLaunch(exec, stream_));
      }
      if (status.ok()) status = CU_STATUS(Cu().StreamSynchronize(stream_));
      const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
      if (r >= 0) samples.push_back(static_cast<double>(nodes) * replays / dt.count());
    }
    Cu().GraphExecDestroy(exec);
    RETURN_IF_ERROR(status);
    return samples;
  }

  absl::StatusOr<std::vector<double>> SmallReadMicros(int reads) override {
    PinnedBuffer host;
    DeviceBuffer dev;
    CU_RETURN_IF_ERROR(Cu().MemHostAlloc(&host.ptr, 4, 0));
    CU_RETURN_IF_ERROR(Cu().MemAlloc(&dev.ptr, 4));
    CU_RETURN_IF_ERROR(Cu().MemsetD32Async(dev.ptr, 0x3f800000u, 1, stream_));  // 1.0f
    std::vector<double> samples;
    for (int r = -20; r < reads; ++r) {  // r < 0: warm-up.
      const auto t0 = std::chrono::steady_clock::now();
      CU_RETURN_IF_ERROR(Cu().MemcpyDtoHAsync(host.ptr, dev.ptr, 4, stream_));
      CU_RETURN_IF_ERROR(Cu().StreamSynchronize(stream_));
      const std::chrono::duration<double, std::micro> dt = std::chrono::steady_clock::now() - t0;
      if (r >= 0) samples.push_back(dt.count());
    }
    float v = 0;
    std::memcpy(&v, host.ptr, 4);
    if (v != 1.0f) return absl::InternalError("the 4-byte read returned the wrong value");
    return samples;
  }

  absl::StatusOr<std::vector<double>> SgemmSeconds(uint64_t m, uint64_t n, uint64_t k, int iters,
                                                   int repeats) override {
    ASSIGN_OR_RETURN(std::unique_ptr<Cublas> blas, Cublas::Load(stream_));
    DeviceBuffer a, b, c;
    CU_RETURN_IF_ERROR(Cu().MemAlloc(&a.ptr, m * k * 4));
    CU_RETURN_IF_ERROR(Cu().MemAlloc(&b.ptr, k * n * 4));
    CU_RETURN_IF_ERROR(Cu().MemAlloc(&c.ptr, m * n * 4));
    RETURN_IF_ERROR(Upload(a.ptr, m * k * 4));
    RETURN_IF_ERROR(Upload(b.ptr, k * n * 4));
    for (int i = 0; i < 2; ++i) RETURN_IF_ERROR(blas->Sgemm(m, n, k, a.ptr, b.ptr, c.ptr));
    std::vector<double> samples;
    for (int r = 0; r < repeats; ++r) {
      CU_RETURN_IF_ERROR(Cu().EventRecord(start_, stream_));
      for (int i = 0; i < iters; ++i) RETURN_IF_ERROR(blas->Sgemm(m, n, k, a.ptr, b.ptr, c.ptr));
      ASSIGN_OR_RETURN(double seconds, StopSeconds());
      samples.push_back(seconds / iters);
    }
    return samples;
  }

 private:
  // Writes the float pattern into device memory and waits.
  absl::Status Upload(CUdeviceptr dst, uint64_t bytes) {
    std::vector<uint8_t> host(bytes);
    FillPattern(host.data(), bytes);
    CU_RETURN_IF_ERROR(Cu().MemcpyHtoDAsync(dst, host.data(), bytes, stream_));
    CU_RETURN_IF_ERROR(Cu().StreamSynchronize(stream_));
    return absl::OkStatus();
  }

  // Records stop_, waits for it and returns the seconds since start_.
  absl::StatusOr<double> StopSeconds() {
    CU_RETURN_IF_ERROR(Cu().EventRecord(stop_, stream_));
    CU_RETURN_IF_ERROR(Cu().EventSynchronize(stop_));
    float ms = 0;
    CU_RETURN_IF_ERROR(Cu().EventElapsedTime(&ms, start_, stop_));
    return ms / 1000.0;
  }

  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
  CUevent start_ = nullptr;
  CUevent stop_ = nullptr;
  CUmodule module_ = nullptr;
  CUfunction empty_ = nullptr;
  CUfunction empty_args_ = nullptr;
  std::string describe_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<CudaBaseline>> CudaBaseline::Open(int ordinal) {
  auto b = std::make_unique<CudaBaselineImpl>();
  RETURN_IF_ERROR(b->Init(ordinal));
  return b;
}

}  // namespace cubed::bench
