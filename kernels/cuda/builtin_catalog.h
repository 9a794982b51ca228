#pragma once

// Which CUDA kernel implements each builtin (kernels/builtin.h, docs/kernel-abi.md) for each
// element type: the NVRTC program (an embedded .cuh and the name expressions it instantiates)
// and the name expression of the kernel. Programs group a kernel family's instantiations so that
// NVRTC compiles each once.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/elem_type.h"

namespace cubed::kernels {

// How a builtin maps onto the launch: which iteration space `count` describes and the launch
// shape (BuiltinLaunchDims).
enum class CudaFamily : uint8_t {
  kFill,
  kCopy,
  kCast,
  kUnary,
  kBinary,
  kCompare,  // Binary with a bool output.
  kWhere,    // cond, x, y -> out.
  kReduce,
  kSoftmax,
  kMatmul,
  kNorm,
  kGather,
  kAttention,  // q, k, v -> out (causal_attention).
};

// One NVRTC program of builtin kernels.
struct CudaBuiltinProgram {
  std::string name;                      // e.g. "binary_f32": for logs and cache records.
  std::string source;                    // Embedded file name, e.g. "elementwise.cuh".
  std::vector<std::string> expressions;  // Name expressions to instantiate, sorted, unique.
};

// One builtin kernel instantiation.
struct CudaBuiltinKernel {
  CudaFamily family;
  size_t program;          // Index into CudaBuiltinPrograms().
  std::string expression;  // e.g. "cubed::BinaryKernel<cubed::AddOp, float>".
};

// Every program, in a fixed order. Built once; never changes.
const std::vector<CudaBuiltinProgram>& CudaBuiltinPrograms();

// The family of builtin `name` taking `num_buffers` buffers. NOT_FOUND for an unknown kernel,
// INVALID_ARGUMENT for a known name with another buffer count.
absl::StatusOr<CudaFamily> FindCudaFamily(absl::string_view name, size_t num_buffers);

// The kernel for a call. NOT_FOUND / INVALID_ARGUMENT as FindCudaFamily; INVALID_ARGUMENT naming
// the kernel and dtype when the kernel does not support it. `out_dtype` matters for cast only,
// `index_dtype` (i32 or i64) for gather only.
absl::StatusOr<CudaBuiltinKernel> FindCudaBuiltin(absl::string_view name, size_t num_buffers,
                                                  ElemType dtype, ElemType out_dtype,
                                                  ElemType index_dtype = ElemType::kI64);

// Every (name, buffers, dtype, out_dtype) the CUDA backend supports, for tests and warm-up.
struct CudaBuiltinSignature {
  std::string name;
  size_t num_buffers;
  ElemType dtype;
  ElemType out_dtype;
  ElemType index_dtype = ElemType::kI64;  // Gather's indices.
};
std::vector<CudaBuiltinSignature> CudaBuiltinSignatures();

}  // namespace cubed::kernels
