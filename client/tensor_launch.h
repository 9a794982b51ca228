#pragma once

// Builds the launch description of a builtin kernel over tensors: CubeCL metadata from the
// tensors' layouts and a static cube count from the output size.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/client.h"

namespace cubed {

// Units per cube assumed when deriving a cube count.
inline constexpr uint64_t kUnitsPerCube = 256;
// Largest cube count used per dimension (CUDA's y/z limit; every backend accepts it).
inline constexpr uint64_t kMaxCubesPerDim = 65535;

// A cube count covering `elements` units at kUnitsPerCube per cube: x = ceil(n / 256) capped at
// kMaxCubesPerDim, spilling into y and then z (each capped). At least 1 in every dimension.
CubeCount CubeCountFor(uint64_t elements);

struct TensorLaunch {
  CubeCount count;
  LaunchBindings bindings;
};

// Buffers = inputs then outputs, all of them tensors; buffer_len = handle bytes / elem_size;
// the count from the first output's elements (the first input's when there is no output).
// INVALID_ARGUMENT for no tensors, an empty handle, a zero elem_size, shape/stride rank mismatch,
// or metadata values beyond 32 bits.
// `bindings.scalars` is left empty: Client::Execute passes the caller's scalars as they are.
absl::StatusOr<TensorLaunch> BuildTensorLaunch(absl::Span<const Tensor> inputs,
                                               absl::Span<const Tensor> outputs);

}  // namespace cubed
