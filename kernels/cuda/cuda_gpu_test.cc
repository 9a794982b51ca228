// Conformance of the builtin CUDA kernels against the CPU library (ggml's test-backend-ops
// pattern): every builtin, for every dtype and cast pair, on dense, strided, broadcast and
// misaligned layouts, run on the GPU through the project's driver table (common/cuda) and compared
// with RunBuiltinCpu. Skipped where the CUDA driver (libcuda.so.1) or a GPU is missing.
// CUBED_CUDA_BENCH=1 also measures elementwise bandwidth against a device-to-device copy.

#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/cuda/cuda_context.h"
#include "common/cuda/cuda_driver.h"
#include "common/half.h"
#include "common/kernel_metadata.h"
#include "gtest/gtest.h"
#include "kernels/builtin.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/builtin_catalog.h"
#include "kernels/cuda/cuda_kernels.h"

namespace cubed::kernels {
namespace {

// The project's driver table (common/cuda) and device 0's primary context, current on the
// test's thread.
struct Driver {
  std::unique_ptr<CudaContext> context;
  int cc_major = 0, cc_minor = 0, sm_count = 0;

  // A reason to skip, or "" once a context is current.
  std::string Open() {
    absl::StatusOr<std::unique_ptr<CudaContext>> ctx = CudaContext::Retain(0);
    if (!ctx.ok()) return std::string(ctx.status().message());
    context = *std::move(ctx);
    if (absl::Status s = context->MakeCurrent(); !s.ok()) return std::string(s.message());
    const CUdevice dev = context->device();
    Cu().DeviceGetAttribute(&cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    Cu().DeviceGetAttribute(&cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    Cu().DeviceGetAttribute(&sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    return "";
  }
};

#define CU_OK(call) ASSERT_EQ((call), CUDA_SUCCESS) << #call

class Gpu {
 public:
  Driver d;
  std::unique_ptr<CudaKernelCompiler> compiler;
  std::map<std::string, CUmodule> modules;  // By cache key.
  CUdeviceptr workspace = 0;                // Note [Split reduction]: counters kept zero.
  uint64_t workspace_bytes = 0;

  // A workspace of at least `bytes` (zeroed when it grows), for the launch `args` describes.
  void SetWorkspace(uint64_t bytes, CudaBuiltinArgs* args) {
    if (bytes == 0) return;
    if (bytes > workspace_bytes) {
      if (workspace != 0) Cu().MemFree(workspace);
      EXPECT_EQ(Cu().MemAlloc(&workspace, bytes), CUDA_SUCCESS);
      EXPECT_EQ(Cu().MemsetD8Async(workspace, 0, bytes, nullptr), CUDA_SUCCESS);
      workspace_bytes = bytes;
    }
    args->workspace = workspace;
  }
  // Whether every split counter is zero again (each launch must leave them so).
  bool CountersZero() {
    if (workspace == 0) return true;
    std::vector<uint32_t> counters(CUBED_CUDA_SPLIT_GROUPS);
    EXPECT_EQ(Cu().MemcpyDtoH(counters.data(), workspace, counters.size() * 4), CUDA_SUCCESS);
    for (uint32_t c : counters) {
      if (c != 0) return false;
    }
    return true;
  }

  CUfunction Function(const CompiledCudaKernel& k) {
    CUmodule& m = modules[k.cache_key];
    if (m == nullptr) {
      EXPECT_EQ(Cu().ModuleLoadData(&m, k.image.data()), CUDA_SUCCESS);
    }
    CUfunction f = nullptr;
    EXPECT_EQ(Cu().ModuleGetFunction(&f, m, k.entry_point.c_str()), CUDA_SUCCESS) << k.entry_point;
    return f;
  }
};

Gpu* TheGpu(std::string* skip) {
  static std::string reason;
  static Gpu* gpu = []() -> Gpu* {
    auto g = std::make_unique<Gpu>();
    reason = g->d.Open();
    if (!reason.empty()) return nullptr;
    auto c =
        CudaKernelCompiler::Create(CudaCompilerOptions{g->d.cc_major, g->d.cc_minor, "", 64, {}});
    if (!c.ok()) {
      reason = std::string(c.status().message());
      return nullptr;
    }
    g->compiler = *std::move(c);
    return g.release();  // Lives for the process, like the context.
  }();
  *skip = reason;
  return gpu;
}

TensorLayout Strided(std::vector<uint64_t> shape, std::vector<uint64_t> strides) {
  TensorLayout t;
  t.rank = static_cast<uint32_t>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    t.shape[i] = shape[i];
    t.strides[i] = strides[i];
  }
  return t;
}
TensorLayout Dense(std::vector<uint64_t> shape) { return TensorLayout::Contiguous(shape); }

uint64_t Rng(uint64_t* s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}

// Writes `v` as element `i` of `p`, of type `t` (integers: truncated, two's complement).
void SetElement(ElemType t, uint8_t* p, uint64_t i, double v) {
  const uint32_t es = ElemSize(t);
  switch (t) {
    case ElemType::kF32: {
      const float f = static_cast<float>(v);
      std::memcpy(p + 4 * i, &f, 4);
      return;
    }
    case ElemType::kF64:
      std::memcpy(p + 8 * i, &v, 8);
      return;
    case ElemType::kF16: {
      const uint16_t h = Half(v).bits;
      std::memcpy(p + 2 * i, &h, 2);
      return;
    }
    case ElemType::kBF16: {
      const uint16_t h = BFloat16(v).bits;
      std::memcpy(p + 2 * i, &h, 2);
      return;
    }
    default: {
      const int64_t x = static_cast<int64_t>(v);
      std::memcpy(p + es * i, &x, es);  // Little-endian: the low bytes.
      return;
    }
  }
}

// Random elements of `t`, with the values that exercise edge cases mixed in.
// `tame`: no huge finite values (whose cancellation makes reordered float sums differ a lot).
// `plain`: no special values at all.
void FillRandom(ElemType t, uint8_t* p, uint64_t n, uint64_t* seed, bool tame = false,
                bool plain = false) {
  const double inf = std::numeric_limits<double>::infinity();
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t r = Rng(seed);
    const bool special = !plain && r % 13 == 0;
    const double u = static_cast<double>(r % 100000) / 12500.0 - 4.0;
    const uint32_t es = ElemSize(t);
    if (t == ElemType::kBool) {
      // Any non-zero byte is true: 7 checks that kernels read it so and write 0 or 1.
      p[i] = special ? 7 : static_cast<uint8_t>(r % 2);
      continue;
    }
    if (IsFloat(t)) {
      const double nan = std::numeric_limits<double>::quiet_NaN();
      // Halves: their denormals and largest finite values instead of f32's huge numbers (bf16:
      // 1e30, so that f32 sums of a few cannot overflow in one summation order and not another).
      const double big = t == ElemType::kF16 ? 65504.0 : 1e30;
      const double tiny = t == ElemType::kF16 ? 5.960464477539063e-08 : 9.2e-41;
      const double full[] = {nan, inf, -inf, -0.0, 0.0, 1e10, -3e9, 5e38, -1.5, 0.5};
      const double half[] = {nan, inf, -inf, -0.0, 0.0, big, -tiny, tiny, -1.5, 0.5};
      double v = special ? (IsHalf(t) ? half : full)[(r / 13) % 10] : u;
      if (tame && std::isfinite(v) && std::fabs(v) > 100) v = 2.0;
      SetElement(t, p, i, v);
      continue;
    }
    // Integers: the type's limits among small values.
    const int bits = 8 * static_cast<int>(es);
    const int64_t lo = IsSigned(t) ? (bits == 64 ? INT64_MIN : -(int64_t{1} << (bits - 1))) : 0;
    const int64_t hi = bits == 64 ? INT64_MAX : (int64_t{1} << (bits - (IsSigned(t) ? 1 : 0))) - 1;
    const int64_t specials[] = {lo, hi, -1, 0, bits > 32 ? int64_t{1} << 40 : 1};
    const int64_t v = special ? specials[(r / 13) % 5] : static_cast<int64_t>(r % 201) - 100;
    std::memcpy(p + es * i, &v, es);
  }
}

struct Case {
  std::string label;
  BuiltinCall call;
  std::vector<TensorLayout> tensors;
  uint64_t misalign = 0;  // Elements of offset of every buffer from an aligned address.
  bool plain = false;     // Input values without NaN, infinities and huge values.
  // Values written into input 0 after the random fill: (element, value); NaN only for floats.
  std::vector<std::pair<uint64_t, double>> plant;
  bool split = false;  // Expect the launch to split its axis over blocks.
  // Launched as on a GPU of this many SMs (0: the real count): a small grid, so that a few
  // thousand elements take the dense path's grid-stride loop through several steps.
  uint32_t sm_count = 0;
};

// Relative tolerance for a kernel's float results; 0 = bitwise (NaN matches any NaN).
double Tolerance(const std::string& name, ElemType t) {
  static const char* exact[] = {"fill", "copy", "cast", "neg", "abs",   "relu",   "add", "sub",
                                "mul",  "div",  "max",  "min", "sqrt",  "argmax", "eq",  "ne",
                                "lt",   "le",   "gt",   "ge",  "where", "gather"};
  for (const char* e : exact) {
    if (name == e) return 0;
  }
  // f16 and bf16 compute in f32 and round once: a reordered f32 sum or a last-ulp difference in
  // the math library moves a result by at most an ulp or two of the half type.
  if (t == ElemType::kF16) return 2e-3;
  if (t == ElemType::kBF16) return 1.6e-2;
  if (name == "matmul") return t == ElemType::kF32 ? 1e-4 : 1e-12;
  // causal_attention: scores of 64 products near 30 feed exp, so an f32 reordering moves p by
  // ~1e-6 relative; the MMA path rounds p to the half type before P V (flash attention), within
  // the half tolerances above.
  if (name == "causal_attention") return t == ElemType::kF32 ? 1e-4 : 1e-12;
  // f32 norms: f32 statistics on the GPU, f64 on the CPU. x - mean of a row far from zero keeps
  // the f32 mean's rounding, ulp(mean) * rstd (3e-5 for the constant-rows case's 300.75 +- 0.75,
  // as torch's f32 statistics), times the weight (up to 4 here), and w * v + b may cancel to a
  // result far smaller than either term: 1e-4 failed in GPU run 24, by up to 1.2e-4.
  if (name == "layer_norm" || name == "rms_norm") return t == ElemType::kF32 ? 5e-4 : 1e-12;
  return t == ElemType::kF32 ? 2e-6 : 1e-13;
}

std::string CompareOutput(const Case& c, ElemType out_t, const std::vector<uint8_t>& want,
                          const std::vector<uint8_t>& got) {
  const double tol = Tolerance(c.call.name, c.call.dtype);
  const uint32_t es = ElemSize(out_t);
  int reported = 0;
  std::string err;
  for (uint64_t i = 0; i * es < want.size(); ++i) {
    if (std::memcmp(&want[i * es], &got[i * es], es) == 0) continue;
    double w = 0, g = 0;
    bool same = false;
    if (out_t == ElemType::kF32) {
      float a, b;
      std::memcpy(&a, &want[i * es], 4);
      std::memcpy(&b, &got[i * es], 4);
      w = a;
      g = b;
    } else if (out_t == ElemType::kF64) {
      std::memcpy(&w, &want[i * es], 8);
      std::memcpy(&g, &got[i * es], 8);
    } else if (IsHalf(out_t)) {
      uint16_t a, b;
      std::memcpy(&a, &want[i * es], 2);
      std::memcpy(&b, &got[i * es], 2);
      w = out_t == ElemType::kF16 ? float(Half::FromBits(a)) : float(BFloat16::FromBits(a));
      g = out_t == ElemType::kF16 ? float(Half::FromBits(b)) : float(BFloat16::FromBits(b));
    } else {
      if (reported++ < 5) {
        int64_t a = 0, b = 0;
        std::memcpy(&a, &want[i * es], es);
        std::memcpy(&b, &got[i * es], es);
        absl::StrAppend(&err, " [", i, "] want ", a, " got ", b, ";");
      }
      continue;
    }
    if (std::isnan(w) && std::isnan(g)) same = true;
    if (w == g) same = true;  // +0 / -0 only where the kernel is not exact.
    if (tol > 0 && std::isfinite(w) && std::fabs(w - g) <= tol * std::max(1.0, std::fabs(w))) {
      same = true;
    }
    if (tol == 0 && w == g && std::signbit(w) != std::signbit(g)) same = false;
    if (!same && reported++ < 5) absl::StrAppend(&err, " [", i, "] want ", w, " got ", g, ";");
  }
  if (reported > 5) absl::StrAppend(&err, " ... ", reported, " mismatches");
  return err;
}

void RunCase(Gpu& gpu, const Case& c) {
  SCOPED_TRACE(c.label);
  BuiltinCall call = c.call;
  const size_t n = c.tensors.size();
  std::vector<uint64_t> lens, bytes;
  std::vector<ElemType> types;
  auto buffers = BuiltinBufferTypes(call, n);
  ASSERT_TRUE(buffers.ok()) << buffers.status();
  for (size_t i = 0; i < n; ++i) {
    const ElemType t = buffers->types[i];
    types.push_back(t);
    lens.push_back(c.tensors[i].SpanElements());
    bytes.push_back(lens.back() * ElemSize(t));
  }
  auto meta = EncodeKernelMetadata(lens, c.tensors);
  ASSERT_TRUE(meta.ok()) << meta.status();
  call.metadata = kernels::ToMetadataWords(*meta);
  uint64_t seed = 12345;
  std::vector<std::vector<uint8_t>> host(n);
  for (size_t i = 0; i < n; ++i) {
    host[i].assign(bytes[i], 0x5a);
    if (i + 1 < n) {
      FillRandom(types[i], host[i].data(), lens[i], &seed, call.name == "matmul", c.plain);
    }
  }
  for (const auto& [i, v] : c.plant) {
    if (IsFloat(types[0]) || !std::isnan(v)) SetElement(types[0], host[0].data(), i, v);
  }
  // CPU reference.
  std::vector<std::vector<uint8_t>> cpu = host;
  std::vector<HostBuffer> hb;
  for (auto& b : cpu) hb.push_back({b.data(), b.size()});
  const absl::Status cpu_status = RunBuiltinCpu(call, hb);
  ASSERT_TRUE(cpu_status.ok()) << cpu_status;
  // GPU.
  auto args = MakeCudaBuiltinArgs(call, bytes);
  ASSERT_TRUE(args.ok()) << args.status();
  auto kernel = gpu.compiler->Builtin(call, n);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  CUfunction f = gpu.Function(**kernel);
  ASSERT_NE(f, nullptr);
  std::vector<CUdeviceptr> dev(n);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t off = c.misalign * ElemSize(types[i]);
    CU_OK(Cu().MemAlloc(&dev[i], bytes[i] + off + 16));
    if (!host[i].empty()) {
      CU_OK(Cu().MemcpyHtoD(dev[i] + off, host[i].data(), bytes[i]));
    }
    args->buffers[i].ptr = dev[i] + off;
  }
  const CudaLaunchDims dims =
      BuiltinLaunchDims(call, &*args, c.sm_count != 0 ? c.sm_count : gpu.d.sm_count);
  EXPECT_EQ(args->splits > 1, c.split) << "splits " << args->splits;
  gpu.SetWorkspace(dims.workspace_bytes, &*args);
  void* params[] = {&*args};
  CU_OK(Cu().LaunchKernel(f, dims.grid[0], dims.grid[1], dims.grid[2], dims.block[0], dims.block[1],
                          dims.block[2], dims.shared_bytes, nullptr, params, nullptr));
  CU_OK(Cu().CtxSynchronize());
  EXPECT_TRUE(gpu.CountersZero());
  std::vector<uint8_t> got(bytes[n - 1]);
  if (!got.empty()) {
    CU_OK(
        Cu().MemcpyDtoH(got.data(), dev[n - 1] + c.misalign * ElemSize(types[n - 1]), got.size()));
  }
  for (CUdeviceptr p : dev) Cu().MemFree(p);
  const std::string err = CompareOutput(c, types[n - 1], cpu[n - 1], got);
  EXPECT_TRUE(err.empty()) << err;
}

BuiltinCall MakeCall(const CudaBuiltinSignature& s) {
  BuiltinCall call;
  call.name = s.name;
  call.dtype = s.dtype;
  call.out_dtype = s.out_dtype;
  call.index_dtype = s.index_dtype;
  if (s.name == "fill") {
    ScalarGroup g;
    g.elem = s.dtype;
    g.bytes.resize(ElemSize(s.dtype));
    uint64_t seed = 99;
    FillRandom(s.dtype, g.bytes.data(), 1, &seed);
    call.scalars.push_back(g);
  }
  const bool scaled = s.name == "causal_softmax" || s.name == "causal_attention";
  if (s.name == "layer_norm" || s.name == "rms_norm" || scaled) {
    ScalarGroup param{ElemType::kF64, ScalarBytes(8)};  // eps, or the scale.
    const double value = scaled ? 0.125 : 1e-5;
    std::memcpy(param.bytes.data(), &value, 8);
    call.scalars.push_back(param);
  }
  return call;
}

std::vector<Case> CasesFor(const CudaBuiltinSignature& s, CudaFamily family) {
  const BuiltinCall call = MakeCall(s);
  const std::string base = absl::StrCat(
      s.name, "/", s.num_buffers, " ", ElemTypeName(s.dtype),
      s.name == "cast" ? absl::StrCat("->", ElemTypeName(s.out_dtype)) : "",
      s.name == "gather" ? absl::StrCat(" indices ", ElemTypeName(s.index_dtype)) : "");
  std::vector<Case> cases;
  auto add = [&](const char* what, std::vector<TensorLayout> t, uint32_t axis = 0,
                 uint64_t misalign = 0) -> Case& {
    Case c{absl::StrCat(base, " ", what), call, std::move(t), misalign, false, {}, false};
    c.call.axis = axis;
    cases.push_back(std::move(c));
    return cases.back();
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  switch (family) {
    case CudaFamily::kFill:
      add("dense", {Dense({1003})});
      add("misaligned", {Dense({1003})}, 0, 1);
      add("strided", {Strided({7, 30}, {40, 1})});
      break;
    case CudaFamily::kCopy:
    case CudaFamily::kCast:
    case CudaFamily::kUnary:
      add("dense", {Dense({3, 1001}), Dense({3, 1001})});
      // One SM's grid (32 blocks of 256 threads): 2-7 steps of the grid-stride loop by the pack
      // size, the last one partial, then the tail.
      add("grid-strided", {Dense({7, 16411}), Dense({7, 16411})}).sm_count = 1;
      add("misaligned", {Dense({1003}), Dense({1003})}, 0, 1);
      add("transposed", {Strided({30, 20}, {1, 30}), Strided({30, 20}, {24, 1})});
      break;
    case CudaFamily::kBinary:
    case CudaFamily::kCompare:
      add("dense", {Dense({3, 1001}), Dense({3, 1001}), Dense({3, 1001})});
      add("misaligned", {Dense({1003}), Dense({1003}), Dense({1003})}, 0, 1);
      add("broadcast", {Dense({7, 1}), Dense({1, 131}), Strided({7, 131}, {140, 1})});
      add("transposed", {Strided({20, 30}, {1, 20}), Dense({20, 30}), Dense({20, 30})});
      // CUBED_CUDA_SUFFIX: a bias row (4 at a time, and an odd one), a scalar, a block.
      add("bias row", {Dense({5, 8, 12}), Dense({1, 1, 12}), Dense({5, 8, 12})});
      add("odd bias row", {Dense({1, 1, 5}), Dense({3, 7, 5}), Dense({3, 7, 5})});
      add("scalar", {Dense({9, 13}), Dense({1, 1}), Dense({9, 13})});
      add("bias block misaligned", {Dense({4, 6, 8}), Dense({1, 6, 8}), Dense({4, 6, 8})}, 0, 1);
      break;
    case CudaFamily::kWhere:
      add("dense", {Dense({3, 1001}), Dense({3, 1001}), Dense({3, 1001}), Dense({3, 1001})});
      add("misaligned", {Dense({1003}), Dense({1003}), Dense({1003}), Dense({1003})}, 0, 1);
      add("mask over one value",
          {Dense({7, 131}), Dense({7, 131}), Dense({1, 1}), Dense({7, 131})});
      add("broadcast",
          {Dense({7, 1}), Dense({1, 131}), Strided({7, 131}, {1, 7}), Strided({7, 131}, {140, 1})});
      break;
    case CudaFamily::kReduce:
      add("warp", {Dense({37, 300}), Dense({37, 1})}, 1);
      add("warp per long row", {Dense({2100, 3000}), Dense({2100, 1})}, 1).split = true;
      add("block", {Dense({3, 5000}), Dense({3, 1})}, 1);
      add("thread", {Dense({50, 20000}), Dense({1, 20000})}, 0).split = true;
      // Threads per column, split: misaligned, odd widths, pitched rows, many rows.
      add("thread columns", {Dense({40, 1024}), Dense({1, 1024})}, 0).split = true;
      add("thread columns misaligned", {Dense({40, 1024}), Dense({1, 1024})}, 0, 1).split = true;
      add("thread columns middle", {Dense({6, 50, 256}), Dense({6, 1, 256})}, 1).split = true;
      add("thread columns odd", {Dense({40, 1026}), Dense({1, 1026})}, 0).split = true;
      add("thread columns pitched", {Strided({40, 512}, {514, 1}), Dense({1, 512})}, 0).split =
          true;
      add("thread columns 4096", {Dense({4096, 4096}), Dense({1, 4096})}, 0).split = true;
      add("middle", {Dense({4, 9, 5}), Dense({4, 1, 5})}, 1);
      add("transposed", {Strided({300, 37}, {1, 300}), Dense({1, 37})}, 0);
      if (s.name == "sum" || s.name == "mean") {  // max, min, argmax refuse an empty axis.
        add("empty axis", {Dense({3, 0}), Dense({3, 1})}, 1);
      }
      // Note [Split reduction]: few outputs, the axis split over blocks.
      add("split full", {Dense({1 << 22}), Dense({1})}, 0).split = true;
      add("split specials", {Dense({3, 1000003}), Dense({3, 1})}, 1, 1).split = true;
      add("split columns", {Dense({4096, 300}), Dense({1, 300})}, 0).split = true;
      add("split strided", {Strided({2, 200001}, {1, 2}), Dense({2, 1})}, 1).split = true;
      add("split middle", {Dense({2, 50000, 3}), Dense({2, 1, 3})}, 1).split = true;
      {
        // Plain values: sums and means stay finite; planted maxima and NaNs in late slices.
        Case& c = add("split late max", {Dense({1 << 21}), Dense({1})}, 0, 1);
        c.split = c.plain = true;
        c.plant = {{1500001, 1000}, {1500000, 7}, {2000000, 1000}, {2090000, 1000}};
        Case& n = add("split late nan", {Dense({2, 1 << 20}), Dense({2, 1})}, 1);
        n.split = n.plain = true;
        n.plant = {{900001, 1000}, {700003, nan}, {1000000, nan}, {(1 << 20) + 5, 1000}};
        Case& p = add("split plain", {Dense({5, 333333}), Dense({5, 1})}, 1, 3);
        p.split = p.plain = true;
      }
      break;
    case CudaFamily::kSoftmax:
      add("warp", {Dense({33, 100}), Dense({33, 100})});
      add("block", {Dense({3, 3000}), Dense({3, 3000})});
      add("transposed", {Strided({20, 50}, {1, 20}), Dense({20, 50})});
      add("cached misaligned", {Dense({5, 4097}), Dense({5, 4097})}, 0, 1);
      add("cached 8k", {Dense({4, 8192}), Dense({4, 8192})});
      add("cached strided", {Strided({3, 700}, {1, 3}), Dense({3, 700})});
      add("three passes", {Dense({2, 40000}), Dense({2, 40000})});
      add("empty rows", {Dense({0, 7}), Dense({0, 7})});
      add("warp plain", {Dense({33, 100}), Dense({33, 100})}).plain = true;
      add("cached plain", {Dense({4, 4096}), Dense({4, 4096})}).plain = true;
      add("cached plain misaligned", {Dense({3, 16383}), Dense({3, 16383})}, 0, 1).plain = true;
      add("three passes plain", {Dense({2, 40000}), Dense({2, 40000})}).plain = true;
      if (s.name == "causal_softmax") {  // Note [Causal rows]: queries of attention heads.
        add("heads", {Dense({2, 3, 64, 64}), Dense({2, 3, 64, 64})}).plain = true;
        add("heads long", {Dense({2, 300, 1500}), Dense({2, 300, 1500})}).plain = true;
        add("heads transposed", {Strided({3, 40, 50}, {1, 150, 3}), Dense({3, 40, 50})});
      }
      break;
    case CudaFamily::kNorm: {
      // in, then weight and bias as the row binds them (1-D, dense or stepped), then out.
      auto norm = [&](const char* what, TensorLayout in, TensorLayout out, uint64_t misalign = 0,
                      uint64_t param_stride = 1) -> Case& {
        const uint64_t len = out.shape[out.rank - 1];
        std::vector<TensorLayout> t = {in};
        for (size_t i = 2; i < s.num_buffers; ++i) t.push_back(Strided({len}, {param_stride}));
        t.push_back(out);
        return add(what, std::move(t), 0, misalign);
      };
      norm("warp", Dense({33, 100}), Dense({33, 100}));
      norm("block", Dense({3, 3000}), Dense({3, 3000}));
      norm("transposed", Strided({20, 50}, {1, 20}), Dense({20, 50}));
      norm("cached misaligned", Dense({5, 4097}), Dense({5, 4097}), 1);
      norm("cached strided", Strided({3, 700}, {1, 3}), Dense({3, 700}), 0, 2);
      norm("streamed", Dense({2, 40000}), Dense({2, 40000}));
      norm("size-1 rows", Dense({37, 1}), Dense({37, 1}));
      norm("empty rows", Dense({0, 7}), Dense({0, 7}));
      norm("warp plain", Dense({33, 100}), Dense({33, 100})).plain = true;
      norm("warp plain stepped", Dense({9, 33}), Dense({9, 33}), 0, 2).plain = true;
      norm("cached plain 4096", Dense({64, 4096}), Dense({64, 4096})).plain = true;
      norm("cached plain misaligned", Dense({3, 16383}), Dense({3, 16383}), 1).plain = true;
      norm("cached plain transposed", Strided({300, 40}, {1, 300}), Dense({300, 40})).plain = true;
      norm("streamed plain", Dense({2, 40000}), Dense({2, 40000})).plain = true;
      norm("streamed plain strided", Strided({2, 70001}, {1, 2}), Dense({2, 70001}), 1, 2).plain =
          true;
      {
        // Constant rows and rows far from zero: the moments' merge (Note [Norm moments]).
        Case& c = norm("constant rows", Dense({4, 3000}), Dense({4, 3000}));
        c.plain = true;
        for (uint64_t i = 0; i < 3000; ++i) c.plant.push_back({i, 2.5});
        for (uint64_t i = 6000; i < 9000; ++i) c.plant.push_back({i, 300 + (i % 7) * 0.25});
      }
      break;
    }
    case CudaFamily::kGather:  // Random indices: in range, from the end, out of range.
      add("warp rows", {Dense({150, 300}), Dense({4, 5}), Dense({4, 5, 300})});
      add("block rows", {Dense({120, 4096}), Dense({7}), Dense({7, 4096})});
      add("misaligned rows", {Dense({150, 301}), Dense({9}), Dense({9, 301})}, 0, 1);
      add("last axis", {Dense({30, 150}), Dense({200}), Dense({30, 200})}, 1);
      add("middle axis", {Dense({3, 150, 5}), Dense({2, 3}), Dense({3, 2, 3, 5})}, 1);
      add("strided", {Strided({150, 40}, {1, 150}), Strided({6}, {2}), Strided({6, 40}, {48, 1})});
      add("padded rows", {Strided({150, 64}, {80, 1}), Dense({5}), Strided({5, 64}, {70, 1})});
      add("scalar index", {Dense({150, 40}), Dense({}), Dense({40})});
      add("no indices", {Dense({150, 40}), Dense({0}), Dense({0, 40})});
      break;
    case CudaFamily::kAttention: {
      // f16 and bf16 with E = Ev = 64 take the tensor cores (Note [Attention paths]); the rest,
      // and misaligned buffers, the generic path. Sizes off the 128-query and 64-key tiles.
      auto attention = [&](const char* what, std::vector<TensorLayout> t, uint64_t misalign = 0) {
        add(what, std::move(t), 0, misalign).plain = true;
      };
      attention("square", {Dense({2, 3, 200, 64}), Dense({2, 3, 200, 64}), Dense({2, 3, 200, 64}),
                           Dense({2, 3, 200, 64})});
      attention("fewer queries", {Dense({1, 2, 70, 64}), Dense({1, 2, 300, 64}),
                                  Dense({1, 2, 300, 64}), Dense({1, 2, 70, 64})});
      attention("more queries", {Dense({2, 1, 300, 64}), Dense({2, 1, 50, 64}),
                                 Dense({2, 1, 50, 64}), Dense({2, 1, 300, 64})});
      // q, k and v views of one [b, L, 3, H, 64] projection; out [b, L, H, 64] seen as
      // [b, H, L, 64] (the Python SDK's layout).
      const uint64_t l = 150, h = 3, row = 3 * h * 64;
      attention("head views", {Strided({2, h, l, 64}, {l * row, 64, row, 1}),
                               Strided({2, h, l, 64}, {l * row, 64, row, 1}),
                               Strided({2, h, l, 64}, {l * row, 64, row, 1}),
                               Strided({2, h, l, 64}, {l * h * 64, 64, h * 64, 1})});
      attention("shared keys", {Dense({2, 3, 130, 64}), Dense({1, 3, 130, 64}),
                                Dense({1, 3, 130, 64}), Dense({2, 3, 130, 64})});
      attention("misaligned",
                {Dense({1, 70, 64}), Dense({1, 70, 64}), Dense({1, 70, 64}), Dense({1, 70, 64})},
                1);
      attention("other dims", {Dense({2, 2, 77, 40}), Dense({2, 2, 90, 40}), Dense({2, 2, 90, 24}),
                               Dense({2, 2, 77, 24})});
      attention("wide values", {Dense({5, 16}), Dense({9, 16}), Dense({9, 300}), Dense({5, 300})});
      attention("transposed keys",
                {Dense({40, 64}), Strided({40, 64}, {1, 40}), Dense({40, 64}), Dense({40, 64})});
      attention("no keys", {Dense({5, 64}), Dense({0, 64}), Dense({0, 64}), Dense({5, 64})});
      // The MMA path takes the row maxima of the raw scores and negates Q for a negative scale
      // (Note [Attention pipeline]); a zero scale averages the visible values. 600 keys: ten
      // tiles through the two stages.
      for (const double scale : {-0.2, 0.0}) {
        Case& c = add(scale < 0 ? "negative scale" : "zero scale",
                      {Dense({1, 2, 600, 64}), Dense({1, 2, 600, 64}), Dense({1, 2, 600, 64}),
                       Dense({1, 2, 600, 64})});
        c.plain = true;
        std::memcpy(c.call.scalars.back().bytes.data(), &scale, sizeof(scale));
      }
      break;
    }
    case CudaFamily::kMatmul:
      add("batched", {Dense({2, 1, 70, 33}), Dense({1, 3, 33, 130}), Dense({2, 3, 70, 130})});
      add("transposed", {Strided({65, 40}, {1, 65}), Strided({40, 66}, {1, 40}), Dense({65, 66})});
      add("k0", {Dense({5, 0}), Dense({0, 6}), Dense({5, 6})});
      add("tiny", {Dense({1, 1}), Dense({1, 1}), Dense({1, 1})});
      break;
  }
  return cases;
}

TEST(CudaGpuTest, EveryBuiltinMatchesTheCpu) {
  std::string skip;
  Gpu* gpu = TheGpu(&skip);
  if (gpu == nullptr) GTEST_SKIP() << skip;
  int cases = 0;
  // CUBED_KERNEL_FILTER=sum,argmax: only those kernels (comma-separated names).
  const char* only = std::getenv("CUBED_KERNEL_FILTER");
  const std::vector<std::string> names =
      only == nullptr ? std::vector<std::string>{} : absl::StrSplit(only, ',');
  for (const CudaBuiltinSignature& s : CudaBuiltinSignatures()) {
    if (!names.empty() && std::find(names.begin(), names.end(), s.name) == names.end()) continue;
    const CudaFamily family = *FindCudaFamily(s.name, s.num_buffers);
    for (const Case& c : CasesFor(s, family)) {
      RunCase(*gpu, c);
      ++cases;
    }
  }
  std::cout << cases << " cases on sm_" << gpu->d.cc_major << gpu->d.cc_minor << "\n";
}

// Bandwidth of dense copy / add / cast against cuMemcpyDtoD on 1 GiB f32 buffers.
TEST(CudaGpuTest, Bandwidth) {
  if (std::getenv("CUBED_CUDA_BENCH") == nullptr) GTEST_SKIP() << "set CUBED_CUDA_BENCH=1";
  std::string skip;
  Gpu* gpu = TheGpu(&skip);
  if (gpu == nullptr) GTEST_SKIP() << skip;
  const uint64_t elems = uint64_t{1} << 28;
  CUdeviceptr a, b, c;
  CU_OK(Cu().MemAlloc(&a, elems * 4));
  CU_OK(Cu().MemAlloc(&b, elems * 4));
  CU_OK(Cu().MemAlloc(&c, elems * 4));
  auto time = [&](auto&& fn) {
    fn();
    Cu().CtxSynchronize();
    const auto start = std::chrono::steady_clock::now();
    const int reps = 20;
    for (int i = 0; i < reps; ++i) fn();
    Cu().CtxSynchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / reps;
  };
  const double memcpy_s = time([&] { Cu().MemcpyDtoD(b, a, elems * 4); });
  const double memcpy_bw = 2.0 * elems * 4 / memcpy_s / 1e9;
  std::cout << "cuMemcpyDtoD: " << memcpy_bw << " GB/s\n";
  // Runs `call` on `t` (buffers a, b, c) and returns seconds per launch.
  auto run = [&](BuiltinCall call, std::vector<TensorLayout> t, uint32_t* grid) -> double {
    std::vector<uint64_t> lens, sizes;
    for (const TensorLayout& l : t) {
      lens.push_back(l.SpanElements());
      sizes.push_back(l.SpanElements() * ElemSize(call.dtype));
    }
    call.metadata = kernels::ToMetadataWords(*EncodeKernelMetadata(lens, t));
    if (call.name == "fill") call.scalars.push_back({ElemType::kF32, {0, 0, 128, 63}});
    auto args = MakeCudaBuiltinArgs(call, sizes);
    EXPECT_TRUE(args.ok()) << args.status();
    if (!args.ok()) return 1;
    const CUdeviceptr ptrs[] = {a, b, c};
    for (size_t i = 0; i < t.size(); ++i) args->buffers[i].ptr = ptrs[i];
    auto k = gpu->compiler->Builtin(call, t.size());
    EXPECT_TRUE(k.ok()) << k.status();
    CUfunction f = gpu->Function(**k);
    const CudaLaunchDims dims = BuiltinLaunchDims(call, &*args, gpu->d.sm_count);
    gpu->SetWorkspace(dims.workspace_bytes, &*args);
    *grid = dims.grid[0];
    void* params[] = {&*args};
    return time([&] {
      Cu().LaunchKernel(f, dims.grid[0], 1, 1, dims.block[0], 1, 1, 0, nullptr, params, nullptr);
    });
  };
  auto bench = [&](const char* name, ElemType out_t, int buffers, double bytes_per_elem) {
    BuiltinCall call;
    call.name = name;
    call.dtype = ElemType::kF32;
    call.out_dtype = out_t;
    uint32_t grid = 0;
    const double s = run(call, std::vector<TensorLayout>(buffers, Dense({elems})), &grid);
    const double bw = bytes_per_elem * elems / s / 1e9;
    std::cout << name << ": " << bw << " GB/s = " << bw / memcpy_bw << " x memcpy (grid " << grid
              << ")\n";
  };
  bench("copy", ElemType::kF32, 2, 8);
  bench("cast", ElemType::kF32, 2, 8);
  bench("neg", ElemType::kF32, 2, 8);
  bench("add", ElemType::kF32, 3, 12);
  bench("fill", ElemType::kF32, 1, 4);
  {
    BuiltinCall call;
    call.name = "sum";
    uint32_t grid = 0;
    const double s = run(call, {Dense({elems}), Dense({1})}, &grid);
    std::cout << "sum [" << elems << "]: " << 4.0 * elems / s / 1e9 << " GB/s (grid " << grid
              << ")\n";
  }
  // Reductions and softmax over 2^28 f32 elements, by shape of the reduced axis.
  const std::vector<std::vector<uint64_t>> shapes = {
      {1u << 16, 1u << 12}, {1u << 14, 1u << 14}, {1u << 20, 256}, {1u << 8, 1u << 20}};
  for (const auto& shape : shapes) {
    for (uint32_t axis = 0; axis < 2; ++axis) {
      BuiltinCall call;
      call.name = "sum";
      call.axis = axis;
      std::vector<uint64_t> out = shape;
      out[axis] = 1;
      uint32_t grid = 0;
      const double s = run(call, {Dense(shape), Dense(out)}, &grid);
      std::cout << "sum [" << shape[0] << ", " << shape[1] << "] axis " << axis << ": "
                << 4.0 * elems / s / 1e9 << " GB/s (grid " << grid << ")\n";
    }
    BuiltinCall call;
    call.name = "softmax";
    uint32_t grid = 0;
    const double s = run(call, {Dense(shape), Dense(shape)}, &grid);
    std::cout << "softmax [" << shape[0] << ", " << shape[1] << "]: " << 8.0 * elems / s / 1e9
              << " GB/s of in+out (grid " << grid << ")\n";
  }
  for (ElemType t : {ElemType::kF32, ElemType::kF64}) {
    const uint64_t n = 4096;
    BuiltinCall call;
    call.name = "matmul";
    call.dtype = t;
    uint32_t grid = 0;
    const double s = run(call, {Dense({n, n}), Dense({n, n}), Dense({n, n})}, &grid);
    std::cout << "matmul " << ElemTypeName(t) << " 4096^3: " << 2.0 * n * n * n / s / 1e12
              << " TFLOP/s\n";
  }
  Cu().MemFree(a);
  Cu().MemFree(b);
  Cu().MemFree(c);
}

}  // namespace
}  // namespace cubed::kernels
