#pragma once

// Reading and writing NumPy .npy files (format versions 1.0, 2.0 and 3.0) for the element types
// cubed knows: little-endian <f4 <f8 <i4 <u4 <i8, C (row-major) order only.
// https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/elem_type.h"

namespace cubed::cubectl {

// An array as stored in a .npy file: element type, shape (empty for a 0-d array) and the densely
// packed row-major little-endian element bytes.
struct NpyArray {
  ElemType dtype = ElemType::kF32;
  std::vector<uint64_t> shape;
  std::string data;
};

// The .npy descr of a type, e.g. "<f4".
absl::string_view NpyDescr(ElemType t);

// Parses a whole .npy file. INVALID_ARGUMENT naming what was wrong: bad magic, unsupported
// version, malformed header, fortran_order True, an unsupported dtype (big-endian, bool, f2, ...),
// or a data length that does not match the shape.
absl::StatusOr<NpyArray> ParseNpy(absl::string_view file);

// Encodes an array as a .npy file (version 1.0, or 2.0 when the header needs it).
// INVALID_ARGUMENT when data.size() != product(shape) * ElemSize(dtype).
absl::StatusOr<std::string> EncodeNpy(ElemType dtype, absl::Span<const uint64_t> shape,
                                      absl::string_view data);

}  // namespace cubed::cubectl
