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

// Note [bf16 in .npy]: .npy has no bfloat16: numpy saves an ml_dtypes.bfloat16 array as raw
// '<V2' records, which load back as bytes, not numbers. cubectl refuses bf16 both ways with an
// error saying to go through f32, rather than write files numpy cannot read as numbers or guess
// what '<V2' holds.

// The .npy descr of a type, e.g. "<f4", "<f2", "|b1"; empty for bf16 (Note [bf16 in .npy]).
absl::string_view NpyDescr(ElemType t);

// Parses a whole .npy file. INVALID_ARGUMENT naming what was wrong: bad magic, unsupported
// version, malformed header, fortran_order True, an unsupported dtype (big-endian, '<V2', complex,
// ...), or a data length that does not match the shape.
absl::StatusOr<NpyArray> ParseNpy(absl::string_view file);

// Encodes an array as a .npy file (version 1.0, or 2.0 when the header needs it).
// INVALID_ARGUMENT when data.size() != product(shape) * ElemSize(dtype) or dtype is bf16
// (Note [bf16 in .npy]).
absl::StatusOr<std::string> EncodeNpy(ElemType dtype, absl::Span<const uint64_t> shape,
                                      absl::string_view data);

}  // namespace cubed::cubectl
