#pragma once

// Test helpers for the CPU kernels: host tensors in several layouts with their own storage, and a
// one-call way to run a builtin kernel on them. The calls themselves: kernels/builtin_test_util.h.

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/elem_type.h"
#include "common/kernel_metadata.h"
#include "kernels/builtin.h"
#include "kernels/builtin_test_util.h"
#include "kernels/cpu/cpu_kernels.h"

namespace cubed::kernels::testing {

enum class Layout {
  kContiguous,   // Dense row-major.
  kPadded,       // Row-major with every row (and every outer dim) padded.
  kColumnMajor,  // Dense, dims reversed in memory (a transposed view).
  kStepped,      // Row-major, every other element.
};

// A tensor on the host. Storage is 8-byte aligned; elements outside the layout hold a sentinel
// so tests can check a kernel never writes them. Not thread-safe.
class TestTensor {
 public:
  TestTensor(ElemType dtype, std::vector<uint64_t> shape, Layout layout = Layout::kContiguous);

  ElemType dtype() const { return dtype_; }
  const std::vector<uint64_t>& shape() const { return shape_; }
  const TensorLayout& layout() const { return layout_; }
  uint64_t buffer_len() const { return buffer_len_; }
  HostBuffer buffer() {
    return {reinterpret_cast<uint8_t*>(storage_.data()), buffer_len_ * ElemSize(dtype_)};
  }

  // Element at a multi-index.
  template <typename T>
  T Get(const std::vector<uint64_t>& idx) const {
    T v;
    std::memcpy(&v, ElemPtr(idx), sizeof(T));
    return v;
  }
  template <typename T>
  void Set(const std::vector<uint64_t>& idx, T v) {
    std::memcpy(ElemPtr(idx), &v, sizeof(T));
  }
  // The element converted to double (exact for the small integers tests use).
  double GetDouble(const std::vector<uint64_t>& idx) const;
  // Stores `v` converted to the dtype.
  void SetDouble(const std::vector<uint64_t>& idx, double v);

  // Seeded random elements: floats uniform in [lo, hi], integers in [-50, 50] ([0, 100] unsigned,
  // 0 or 1 for bool).
  void FillRandom(uint64_t seed, double lo = -2.0, double hi = 2.0);

  // True when no element outside the layout changed since construction.
  bool PaddingIntact() const;

 private:
  uint8_t* ElemPtr(const std::vector<uint64_t>& idx);
  const uint8_t* ElemPtr(const std::vector<uint64_t>& idx) const;

  ElemType dtype_;
  std::vector<uint64_t> shape_;
  TensorLayout layout_;
  uint64_t buffer_len_ = 0;
  std::vector<uint64_t> storage_;
  std::vector<bool> used_;  // Per element of storage: addressed by the layout.
};

// Calls fn(index) for every multi-index of `shape` in row-major order.
void ForEachIndex(const std::vector<uint64_t>& shape,
                  const std::function<void(const std::vector<uint64_t>&)>& fn);

// Encodes the metadata of `tensors` (inputs then output) into `call` and runs RunBuiltinCpu.
absl::Status RunKernel(BuiltinCall call, const std::vector<TestTensor*>& tensors);

// Whether `got` matches `want` for dtype `t`: integers exactly, floats within `rel` (relative,
// absolute near 0; default 1e-5 for f32, 1e-12 for f64); NaN matches NaN.
bool Close(double got, double want, ElemType t, double rel = 0);

// An exact result `v` as the kernel stores it in `t`: integers wrap modulo 2^bits, floats round to
// nearest in the type, bool is v != 0.
double RoundTo(double v, ElemType t);

// Every element type, every one with arithmetic (all but bool), the signed ones and the floats.
extern const std::vector<ElemType> kEveryType;
extern const std::vector<ElemType> kNumeric;
extern const std::vector<ElemType> kSignedTypes;
extern const std::vector<ElemType> kFloatTypes;

// "f32" etc., for test names.
std::string DtypeName(ElemType t);

}  // namespace cubed::kernels::testing
