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
// Elements a thread moves a step on that path, by the size of the wider of its input and output
// elements: 16 bytes (Note [Dense packs] in elementwise.cuh). The launch sizes its grid by it.
#define CUBED_CUDA_DENSE_PACK(elem_size) (16u / (elem_size))
// Binary and comparison launches whose output is dense and whose every input is a dense block
// of the output's trailing dims (a bias [1, 1, N] of out [B, M, N]; a scalar; or the output's
// shape): input element i % (the input's element count) for output element i.
#define CUBED_CUDA_SUFFIX 2u

// `variant` of reductions, softmax, the norms and gather: how many threads cooperate on one output
// (row; gather: one row of the dims after the axis, or with GROUP_THREAD one output element).
#define CUBED_CUDA_GROUP_BLOCK 0u   // One block per output.
#define CUBED_CUDA_GROUP_WARP 1u    // One warp per output.
#define CUBED_CUDA_GROUP_THREAD 2u  // One thread per output (reductions and gather).

// `variant` of causal_attention (Note [Attention paths] in attention.cuh): a warp per query row
// on the CUDA cores, or flash attention on the tensor cores (f16 and bf16, E = Ev = 64, unit
// column strides, every other stride of q, k and v a multiple of 8 elements). Both launch
// blocks of CUBED_CUDA_ATTENTION_MMA_THREADS: 128 (4 warps of 32 queries) or 256 (8 warps of 16).
#define CUBED_CUDA_ATTENTION_GENERIC 0u
#define CUBED_CUDA_ATTENTION_MMA 1u
#define CUBED_CUDA_ATTENTION_MMA_ROWS 128u     // Queries per block of the MMA path.
#define CUBED_CUDA_ATTENTION_MMA_THREADS 128u  // The block of either path.

// Note [Split reduction]: when a reduction has too few outputs to fill the device, `splits`
// blocks share each group of outputs, each folding one slice of the axis into a partial result
// in the workspace; the block that finishes a group last (a counter per group) combines the
// partials in slice order (deterministic) and writes the outputs. The workspace starts with
// CUBED_CUDA_SPLIT_GROUPS u32 counters, zero before the launch and zero again after it (the last
// block resets its counter), then the partials at CUBED_CUDA_SPLIT_PARTIALS_OFFSET, indexed
// [slice][output]. One workspace serves every launch on a stream.
#define CUBED_CUDA_SPLIT_GROUPS 16384u
#define CUBED_CUDA_SPLIT_PARTIALS_OFFSET (CUBED_CUDA_SPLIT_GROUPS * 4u)
#define CUBED_CUDA_SPLIT_PARTIAL_BYTES 16u  // The largest partial (argmax: value and index).

// Softmax and the norms (layer_norm, rms_norm) keep a row in registers, this many bytes per
// thread, when it fits in its group's threads (one read and one write of the row); longer rows
// are read three times (softmax) or twice (norms).
#define CUBED_CUDA_SOFTMAX_CACHE_BYTES 64u

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
  // (reductions), rows (softmax, norms: the output's elements / its last dim, 0 when that dim is
  // 0), batches (matmul, causal_attention: product of the output's leading rank - 2 dims),
  // gather: the output's elements (GROUP_THREAD) or rows (the output's elements / those of its
  // dims after the axis).
  unsigned long long count;
  // fill: the value's bits, little-endian, zero-extended to 64 bits. Norms: eps, an f64's bits;
  // causal_softmax, causal_attention: its scale, an f64's bits.
  unsigned long long scalar;
  unsigned int num_buffers;
  unsigned int axis;     // Reductions: the reduced dim. Softmax, norms: rank - 1. Gather: the
                         // table's.
  unsigned int flags;    // CUBED_CUDA_DENSE, CUBED_CUDA_SUFFIX.
  unsigned int variant;  // CUBED_CUDA_GROUP_* for reductions, softmax, norms, gather;
                         // CUBED_CUDA_ATTENTION_* for causal_attention; else 0.
  // Reductions: blocks per group of outputs (Note [Split reduction]); 0 or 1 = no split.
  unsigned int splits;
  unsigned int reserved;
  unsigned long long workspace;  // Device address of the split workspace; 0 when splits <= 1.
} CudaBuiltinArgs;

#endif  // CUBED_KERNELS_CUDA_BUILTIN_ARGS_H_
