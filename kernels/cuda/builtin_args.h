#ifndef CUBED_KERNELS_CUDA_BUILTIN_ARGS_H_
#define CUBED_KERNELS_CUDA_BUILTIN_ARGS_H_

// The single by-value parameter of every builtin CUDA kernel. Plain C, no includes: compiled by
// the host compiler and, embedded, inside the NVRTC programs of kernels/cuda/*.cuh, so both sides
// see the same layout (64-bit Linux: unsigned long long and unsigned int are 8 and 4 bytes).
// Filled by MakeCudaBuiltinArgs (cuda_kernels.h); the caller writes each buffer's device address.

#define CUBED_CUDA_MAX_BUFFERS 4
#define CUBED_CUDA_MAX_RANK 8

// `flags` bits.
// Every buffer is contiguous (dense row-major) with the output's shape: elementwise kernels index
// all buffers by the linear element index (the vectorized fast path).
#define CUBED_CUDA_DENSE 1u

// `variant` of reductions and softmax: how many threads cooperate on one output (row).
#define CUBED_CUDA_GROUP_BLOCK 0u   // One block per output.
#define CUBED_CUDA_GROUP_WARP 1u    // One warp per output.
#define CUBED_CUDA_GROUP_THREAD 2u  // One thread per output (reductions only).

// One bound buffer viewed as a tensor.
typedef struct CudaTensorArg {
  unsigned long long ptr;    // Device address of element 0 (CUdeviceptr); set by the caller.
  unsigned long long bytes;  // Bytes bound: every access is checked against bytes / elem size.
  unsigned long long shape[CUBED_CUDA_MAX_RANK];
  // Elements (not bytes); 0 along every dim of size 1, so that such dims broadcast.
  unsigned long long strides[CUBED_CUDA_MAX_RANK];
  unsigned int rank;
  unsigned int reserved;
} CudaTensorArg;

typedef struct CudaBuiltinArgs {
  CudaTensorArg buffers[CUBED_CUDA_MAX_BUFFERS];  // Inputs then the output, as bound.
  // Size of the iteration space: elements of the output (fill, copy, cast, unary, binary), outputs
  // (reductions), rows (softmax: the output's elements / its last dim, 0 when that dim is 0),
  // batches (matmul: product of the output's leading rank - 2 dims).
  unsigned long long count;
  // fill: the value's bits, little-endian, zero-extended to 64 bits.
  unsigned long long scalar;
  unsigned int num_buffers;
  unsigned int axis;     // Reductions: the reduced dim. Softmax: rank - 1.
  unsigned int flags;    // CUBED_CUDA_DENSE.
  unsigned int variant;  // CUBED_CUDA_GROUP_* for reductions and softmax; 0 otherwise.
} CudaBuiltinArgs;

#endif  // CUBED_KERNELS_CUDA_BUILTIN_ARGS_H_
