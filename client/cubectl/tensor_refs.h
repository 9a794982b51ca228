#pragma once

// Tensors named on the command line by handle id ("7:2x3") and files read or written by
// commands.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/client.h"
#include "common/elem_type.h"

namespace cubed::cubectl {

// Dense row-major strides (elements) of `shape`.
std::vector<uint64_t> ContiguousStrides(const std::vector<uint64_t>& shape);

// The joined session's handle `id` viewed as a contiguous tensor of `shape` and `dtype`.
// INVALID_ARGUMENT when the handle is smaller than the tensor; NOT_FOUND from the daemon for an
// unknown handle.
absl::StatusOr<Tensor> AttachTensor(Client& client, uint64_t id, const std::vector<uint64_t>& shape,
                                    ElemType dtype);

// "ID:SHAPE" as given to --in/--out; `id` is empty for "new:SHAPE".
struct TensorRef {
  uint64_t id = 0;  // 0 for "new".
  std::vector<uint64_t> shape;
};
// Usage error naming `flag` when malformed.
absl::StatusOr<TensorRef> ParseTensorRef(absl::string_view flag, absl::string_view text);

// Whole-file I/O; NOT_FOUND / PERMISSION_DENIED / INTERNAL naming the path and the OS error.
absl::StatusOr<std::string> ReadFileBytes(const std::string& path);
absl::Status WriteFileBytes(const std::string& path, absl::string_view bytes);

}  // namespace cubed::cubectl
