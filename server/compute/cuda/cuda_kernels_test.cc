// Every builtin kernel on the CUDA backend against the CPU backend, on random inputs
// (CONVENTIONS.md §12: ggml's test-backend-ops pattern).

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/half.h"
#include "common/kernel_metadata.h"
#include "gtest/gtest.h"
#include "kernels/cuda/builtin_catalog.h"
#include "server/compute/cpu/cpu_server.h"
#include "server/compute/cuda/cuda_test_util.h"

namespace cubed {
namespace {

using kernels::CudaBuiltinSignature;
using kernels::CudaFamily;

struct Operand {
  TensorLayout layout;
  uint64_t buffer_elems = 0;  // Elements the buffer holds.
  ElemType type = ElemType::kF32;
};

TensorLayout Layout(std::vector<uint64_t> shape, std::vector<uint64_t> strides = {}) {
  TensorLayout t = TensorLayout::Contiguous(shape);
  for (size_t d = 0; d < strides.size(); ++d) t.strides[d] = strides[d];
  return t;
}

Operand Dense(std::vector<uint64_t> shape, ElemType type) {
  Operand o{Layout(shape), 0, type};
  o.buffer_elems = o.layout.NumElements();
  return o;
}

// The operands of a test call for each kernel family (inputs first, the output last).
std::vector<Operand> OperandsFor(CudaFamily family, const CudaBuiltinSignature& sig) {
  const ElemType in = sig.dtype;
  switch (family) {
    case CudaFamily::kFill:
      return {Dense({33, 65}, in)};
    case CudaFamily::kCopy:
    case CudaFamily::kCast:
    case CudaFamily::kUnary: {
      Operand transposed{Layout({33, 65}, {1, 33}), 33 * 65, in};
      return {transposed, Dense({33, 65}, sig.out_dtype)};
    }
    case CudaFamily::kSoftmax:
      return {Dense({33, 65}, in), Dense({33, 65}, in)};
    case CudaFamily::kBinary: {
      Operand transposed{Layout({33, 65}, {1, 33}), 33 * 65, in};
      return {transposed, Dense({1, 65}, in), Dense({33, 65}, in)};
    }
    case CudaFamily::kCompare: {
      Operand transposed{Layout({33, 65}, {1, 33}), 33 * 65, in};
      return {transposed, Dense({1, 65}, in), Dense({33, 65}, ElemType::kBool)};
    }
    case CudaFamily::kWhere: {
      Operand transposed{Layout({33, 65}, {1, 33}), 33 * 65, in};
      return {Dense({33, 1}, ElemType::kBool), transposed, Dense({1, 65}, in), Dense({33, 65}, in)};
    }
    case CudaFamily::kReduce:
      return {Dense({33, 65}, in), Dense({33, 1}, sig.name == "argmax" ? ElemType::kI64 : in)};
    case CudaFamily::kMatmul:
      return {Dense({2, 17, 23}, in), Dense({1, 23, 19}, in), Dense({2, 17, 19}, in)};
    case CudaFamily::kNorm: {
      Operand transposed{Layout({33, 65}, {1, 33}), 33 * 65, in};
      std::vector<Operand> ops = {transposed};
      for (size_t i = 2; i < sig.num_buffers; ++i) ops.push_back(Dense({65}, in));
      ops.push_back(Dense({33, 65}, in));
      return ops;
    }
    case CudaFamily::kAttention:  // f16 and bf16 on the tensor cores (E = Ev = 64).
      return {Dense({2, 70, 64}, in), Dense({2, 90, 64}, in), Dense({2, 90, 64}, in),
              Dense({2, 70, 64}, in)};
    case CudaFamily::kGather:  // Indices in [-50, 50]: from the end and out of range too.
      return {Dense({40, 65}, in), Dense({3, 11}, sig.index_dtype), Dense({3, 11, 65}, in)};
  }
  return {};
}

// Random elements suited to the kernel (positive for log and sqrt, no zero divisors).
std::string RandomElements(const std::string& kernel, size_t operand, const Operand& o,
                           std::mt19937& rng) {
  const uint64_t n = o.buffer_elems;
  std::string bytes(n * ElemSize(o.type), '\0');
  const bool positive = kernel == "log" || kernel == "sqrt" || (kernel == "pow" && operand == 0);
  const bool divisor = kernel == "div" && operand == 1;
  std::uniform_real_distribution<double> real(positive ? 0.1 : -2.0, 2.0);
  std::uniform_int_distribution<int64_t> integer(IsSigned(o.type) ? -50 : 0, 50);
  for (uint64_t i = 0; i < n; ++i) {
    double r = real(rng);
    int64_t k = integer(rng);
    if (divisor) {
      r = r < 0 ? r - 0.5 : r + 0.5;
      if (k == 0) k = 7;
    }
    char* p = bytes.data() + i * ElemSize(o.type);
    switch (o.type) {
      case ElemType::kF32: {
        const float f = static_cast<float>(r);
        std::memcpy(p, &f, 4);
        break;
      }
      case ElemType::kF64:
        std::memcpy(p, &r, 8);
        break;
      case ElemType::kI32:
      case ElemType::kU32: {
        const int32_t v = static_cast<int32_t>(k);
        std::memcpy(p, &v, 4);
        break;
      }
      case ElemType::kI64:
        std::memcpy(p, &k, 8);
        break;
      case ElemType::kF16: {
        const uint16_t h = Half(r).bits;
        std::memcpy(p, &h, 2);
        break;
      }
      case ElemType::kBF16: {
        const uint16_t h = BFloat16(r).bits;
        std::memcpy(p, &h, 2);
        break;
      }
      case ElemType::kBool:
        *p = static_cast<char>(k & 1);
        break;
      case ElemType::kI8:
      case ElemType::kU8:
      case ElemType::kI16:
      case ElemType::kU16:
        std::memcpy(p, &k, ElemSize(o.type));  // Little-endian: the low bytes.
        break;
    }
  }
  return bytes;
}

double ElementAt(const std::string& bytes, size_t i, ElemType type) {
  const char* p = bytes.data() + i * ElemSize(type);
  switch (type) {
    case ElemType::kF32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case ElemType::kF64: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    case ElemType::kI32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case ElemType::kU32: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case ElemType::kI64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    case ElemType::kF16:
    case ElemType::kBF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return type == ElemType::kF16 ? static_cast<float>(Half::FromBits(h))
                                    : static_cast<float>(BFloat16::FromBits(h));
    }
    case ElemType::kI8:
      return static_cast<int8_t>(*p);
    case ElemType::kU8:
    case ElemType::kBool:
      return static_cast<uint8_t>(*p);
    case ElemType::kI16: {
      int16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    case ElemType::kU16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
  }
  return 0;
}

class BuiltinKernelTest : public ::testing::TestWithParam<CudaBuiltinSignature> {
 protected:
  static void SetUpTestSuite() {
    if (!testing_cuda::CudaDevicePresent()) return;
    gpu_ = testing_cuda::MakeCudaServer().release();
    cpu_ = new CpuServer(CpuServerOptions{});
  }
  static void TearDownTestSuite() {
    delete gpu_;
    delete cpu_;
    gpu_ = nullptr;
    cpu_ = nullptr;
  }

  // Runs the launch on `server` and returns the output's bytes.
  static absl::StatusOr<std::string> Run(ComputeServer& server, kernels::BuiltinCall call,
                                         const std::vector<Operand>& operands,
                                         const std::vector<std::string>& inputs) {
    Launch launch;
    launch.kernel.builtin = std::move(call);
    std::vector<SliceId> slices;
    for (size_t i = 0; i < operands.size(); ++i) {
      const uint64_t bytes = operands[i].buffer_elems * ElemSize(operands[i].type);
      absl::StatusOr<Allocation> a =
          i < inputs.size() ? server.Create(absl::MakeConstSpan(
                                                reinterpret_cast<const uint8_t*>(inputs[i].data()),
                                                inputs[i].size()),
                                            testing_cuda::kTestOwner)
                            : server.Empty(bytes, testing_cuda::kTestOwner);
      if (!a.ok()) return a.status();
      slices.push_back(a->slice);
      launch.buffers.push_back({a->slice, 0, bytes});
    }
    const ResolvedBinding out = launch.buffers.back();
    absl::Status status = server.Execute(std::move(launch));
    absl::StatusOr<std::vector<std::string>> read = testing_cuda::ReadAll(server, {out});
    for (SliceId s : slices) server.Free(s);
    if (!status.ok()) return status;
    if (!read.ok()) return read.status();
    return (*read)[0];
  }

  static CudaServer* gpu_;
  static CpuServer* cpu_;
};

CudaServer* BuiltinKernelTest::gpu_ = nullptr;
CpuServer* BuiltinKernelTest::cpu_ = nullptr;

TEST_P(BuiltinKernelTest, MatchesTheCpuBackend) {
  CUBED_SKIP_WITHOUT_CUDA();
  ASSERT_NE(gpu_, nullptr);
  const CudaBuiltinSignature& sig = GetParam();
  absl::StatusOr<CudaFamily> family = kernels::FindCudaFamily(sig.name, sig.num_buffers);
  ASSERT_TRUE(family.ok()) << family.status();
  const std::vector<Operand> operands = OperandsFor(*family, sig);

  kernels::BuiltinCall call;
  call.name = sig.name;
  call.dtype = sig.dtype;
  call.out_dtype = sig.out_dtype;
  call.index_dtype = sig.index_dtype;
  call.axis = *family == CudaFamily::kReduce ? 1 : 0;
  std::vector<uint64_t> lens;
  std::vector<TensorLayout> layouts;
  for (const Operand& o : operands) {
    lens.push_back(o.buffer_elems);
    layouts.push_back(o.layout);
  }
  call.metadata = kernels::ToMetadataWords(*EncodeKernelMetadata(lens, layouts));
  std::mt19937 rng(12345);
  if (*family == CudaFamily::kFill) {
    Operand one = Dense({1}, sig.dtype);
    const std::string value = RandomElements("fill", 0, one, rng);
    call.scalars = {{sig.dtype, kernels::ScalarBytes(value.begin(), value.end())}};
  }
  if (*family == CudaFamily::kNorm || *family == CudaFamily::kAttention ||
      sig.name == "causal_softmax") {
    const float param = *family == CudaFamily::kNorm ? 1e-5f : 0.125f;  // eps, or the scale.
    std::vector<uint8_t> bytes(4);
    std::memcpy(bytes.data(), &param, 4);
    call.scalars = {{ElemType::kF32, kernels::ScalarBytes(bytes.begin(), bytes.end())}};
  }
  std::vector<std::string> inputs;
  for (size_t i = 0; i + 1 < operands.size(); ++i) {
    inputs.push_back(RandomElements(sig.name, i, operands[i], rng));
  }

  absl::StatusOr<std::string> want = Run(*cpu_, call, operands, inputs);
  ASSERT_TRUE(want.ok()) << want.status();
  absl::StatusOr<std::string> got = Run(*gpu_, call, operands, inputs);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), want->size());

  const ElemType out = operands.back().type;
  const bool accumulates = *family == CudaFamily::kReduce || *family == CudaFamily::kMatmul ||
                           *family == CudaFamily::kSoftmax || *family == CudaFamily::kNorm ||
                           *family == CudaFamily::kAttention;
  const double rtol = out == ElemType::kF16    ? 2e-3
                      : out == ElemType::kBF16 ? 1.6e-2
                      : out == ElemType::kF32  ? (accumulates ? 1e-4 : 2e-5)
                                               : 1e-10;
  int reported = 0;
  for (size_t i = 0; i < operands.back().buffer_elems && reported < 5; ++i) {
    const double g = ElementAt(*got, i, out), w = ElementAt(*want, i, out);
    if (std::isnan(w) && std::isnan(g)) continue;
    // Attention's outputs are averages of values of magnitude up to 2: its rounding (p to the
    // half type before P V on the tensor cores) is relative to that, not to the average.
    const double magnitude =
        *family == CudaFamily::kAttention ? std::max(1.0, std::abs(w)) : std::abs(w);
    const bool close = IsFloat(out) ? std::abs(g - w) <= 1e-6 + rtol * magnitude : g == w;
    if (!close) {
      ADD_FAILURE() << sig.name << ": element " << i << " is " << g << " on cuda, " << w
                    << " on cpu";
      ++reported;
    }
  }
}

std::string SignatureName(const ::testing::TestParamInfo<CudaBuiltinSignature>& info) {
  const CudaBuiltinSignature& s = info.param;
  std::string name = absl::StrCat(s.name, s.num_buffers, "_", ElemTypeName(s.dtype));
  if (s.name == "cast") absl::StrAppend(&name, "_to_", ElemTypeName(s.out_dtype));
  if (s.name == "gather") absl::StrAppend(&name, "_by_", ElemTypeName(s.index_dtype));
  return name;
}

INSTANTIATE_TEST_SUITE_P(AllBuiltins, BuiltinKernelTest,
                         ::testing::ValuesIn(kernels::CudaBuiltinSignatures()), SignatureName);

}  // namespace
}  // namespace cubed
