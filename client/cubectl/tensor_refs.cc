#include "client/cubectl/tensor_refs.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cubectl/args.h"
#include "client/cubectl/connection.h"
#include "common/checked_math.h"
#include "common/status_macros.h"

namespace cubed::cubectl {
namespace {

absl::Status FileError(absl::string_view what, const std::string& path) {
  const int err = errno;
  std::string message = absl::StrCat("cannot ", what, " '", path, "': ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(message);
  if (err == EACCES) return absl::PermissionDeniedError(message);
  return absl::InternalError(message);
}

}  // namespace

std::vector<uint64_t> ContiguousStrides(const std::vector<uint64_t>& shape) {
  std::vector<uint64_t> strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  return strides;
}

absl::StatusOr<Tensor> AttachTensor(Client& client, uint64_t id, const std::vector<uint64_t>& shape,
                                    ElemType dtype) {
  ASSIGN_OR_RETURN(Handle handle, AttachHandle(client, id));
  std::optional<uint64_t> elems = CheckedProduct(shape);
  std::optional<uint64_t> bytes = elems ? CheckedMul(*elems, ElemSize(dtype)) : std::nullopt;
  if (!bytes || *bytes > handle.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "handle ", id, " holds ", handle.size(), " bytes but shape ", absl::StrJoin(shape, "x"),
        " of ", ElemTypeName(dtype), " needs ", bytes ? absl::StrCat(*bytes) : "more"));
  }
  Tensor tensor;
  tensor.handle = std::move(handle);
  tensor.shape = shape;
  tensor.strides = ContiguousStrides(shape);
  tensor.elem_size = ElemSize(dtype);
  return tensor;
}

absl::StatusOr<TensorRef> ParseTensorRef(absl::string_view flag, absl::string_view text) {
  const size_t colon = text.find(':');
  if (colon == absl::string_view::npos) {
    return UsageError(
        absl::StrCat(flag, ": '", text, "' must be HANDLE:SHAPE (e.g. 7:2x3) or new:SHAPE"));
  }
  TensorRef ref;
  absl::string_view id = text.substr(0, colon);
  if (id != "new") {
    ASSIGN_OR_RETURN(ref.id, ParseUint(flag, id));
    if (ref.id == 0) return UsageError(absl::StrCat(flag, ": 0 is not a handle id"));
  }
  ASSIGN_OR_RETURN(ref.shape, ParseShape(flag, text.substr(colon + 1)));
  return ref;
}

absl::StatusOr<std::string> ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return FileError("read", path);
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return FileError("read", path);
  return ss.str();
}

absl::Status WriteFileBytes(const std::string& path, absl::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return FileError("write", path);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return FileError("write", path);
  return absl::OkStatus();
}

}  // namespace cubed::cubectl
