#pragma once

// Test helpers that build builtin kernel calls, for the tests of the catalogue and of every
// backend's kernels.

#include <cstdint>
#include <string>
#include <vector>

#include "common/elem_type.h"
#include "kernels/builtin.h"

namespace cubed::kernels::testing {

// A call with a name and dtype (out_dtype = dtype, axis 0, no scalars, no metadata).
BuiltinCall MakeCall(std::string name, ElemType dtype);

// A scalar group holding one value of `elem`.
ScalarGroup OneScalar(ElemType elem, double value);

// The metadata of contiguous tensors of `shapes` (inputs then output), each buffer exactly as long
// as its tensor.
std::vector<uint32_t> ContiguousMetadata(const std::vector<std::vector<uint64_t>>& shapes);

// MakeCall(name, dtype) with ContiguousMetadata(shapes).
BuiltinCall ContiguousCall(std::string name, ElemType dtype,
                           const std::vector<std::vector<uint64_t>>& shapes);

// Byte sizes of contiguous tensors of `shapes` with elements of `elem_size` bytes.
std::vector<uint64_t> ContiguousBytes(const std::vector<std::vector<uint64_t>>& shapes,
                                      uint64_t elem_size = 4);

}  // namespace cubed::kernels::testing
