#include "client/tensor_launch.h"

#include <algorithm>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "common/kernel_metadata.h"
#include "common/status_macros.h"

namespace cubed {
namespace {

uint64_t CeilDiv(uint64_t a, uint64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

absl::StatusOr<TensorLayout> LayoutOf(const Tensor& t, size_t index) {
  if (!t.handle) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", index, " has an empty handle"));
  }
  if (t.elem_size == 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", index, " has elem_size 0"));
  }
  if (t.shape.size() != t.strides.size()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", index, " has ", t.shape.size(),
                                                   " dimensions but ", t.strides.size(),
                                                   " strides"));
  }
  if (t.shape.size() > kMaxRank) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", index, " has rank ", t.shape.size(), " > ", kMaxRank));
  }
  TensorLayout layout;
  layout.rank = static_cast<uint32_t>(t.shape.size());
  std::copy(t.shape.begin(), t.shape.end(), layout.shape.begin());
  std::copy(t.strides.begin(), t.strides.end(), layout.strides.begin());
  return layout;
}

}  // namespace

CubeCount CubeCountFor(uint64_t elements) {
  uint64_t cubes = std::max<uint64_t>(CeilDiv(elements, kUnitsPerCube), 1);
  CubeCount c;
  c.x = static_cast<uint32_t>(std::min(cubes, kMaxCubesPerDim));
  cubes = CeilDiv(cubes, c.x);
  c.y = static_cast<uint32_t>(std::min(cubes, kMaxCubesPerDim));
  cubes = CeilDiv(cubes, c.y);
  c.z = static_cast<uint32_t>(std::min(cubes, kMaxCubesPerDim));
  return c;
}

absl::StatusOr<TensorLaunch> BuildTensorLaunch(absl::Span<const Tensor> inputs,
                                               absl::Span<const Tensor> outputs) {
  // Inline for the usual handful of tensors: one launch, two heap allocations (the bindings and
  // the metadata it returns).
  absl::InlinedVector<const Tensor*, 4> all;
  for (const Tensor& t : inputs) all.push_back(&t);
  for (const Tensor& t : outputs) all.push_back(&t);
  if (all.empty()) return absl::InvalidArgumentError("a launch needs at least one tensor");

  TensorLaunch launch;
  absl::InlinedVector<uint64_t, 4> buffer_len;
  absl::InlinedVector<TensorLayout, 4> layouts;
  launch.bindings.buffers.reserve(all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    ASSIGN_OR_RETURN(TensorLayout layout, LayoutOf(*all[i], i));
    layouts.push_back(layout);
    buffer_len.push_back(all[i]->handle.size() / all[i]->elem_size);
    launch.bindings.buffers.emplace_back(all[i]->handle);
  }
  ASSIGN_OR_RETURN(launch.bindings.metadata, EncodeKernelMetadata(buffer_len, layouts));
  const Tensor& sized = outputs.empty() ? inputs.front() : outputs.front();
  launch.count = CubeCountFor(sized.NumElements());
  return launch;
}

}  // namespace cubed
