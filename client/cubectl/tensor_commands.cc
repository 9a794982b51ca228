// cubectl create / read: move a file's bytes into a handle of the joined session and back.

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cubectl/commands.h"
#include "client/cubectl/npy.h"
#include "client/cubectl/output.h"
#include "client/cubectl/progress.h"
#include "client/cubectl/tensor_refs.h"
#include "common/checked_math.h"
#include "common/half.h"
#include "common/status_macros.h"

namespace cubed::cubectl {
namespace {

// The tensor a file describes: from a .npy header, or from --shape/--dtype for raw bytes.
struct FileTensor {
  ElemType dtype = ElemType::kF32;
  std::vector<uint64_t> shape;
  std::string data;
};

absl::StatusOr<FileTensor> TensorFromNpy(const Context& ctx, std::string file) {
  ASSIGN_OR_RETURN(NpyArray array, ParseNpy(file));
  if (auto dtype = ctx.args.Get("dtype"); dtype && *dtype != ElemTypeName(array.dtype)) {
    return UsageError(absl::StrCat("--dtype=", *dtype, " does not match the .npy file's ",
                                   NpyDescr(array.dtype), " (", ElemTypeName(array.dtype), ")"));
  }
  if (array.shape.empty()) array.shape = {1};  // A 0-d array is stored as one element.
  if (auto shape = ctx.args.Get("shape")) {
    ASSIGN_OR_RETURN(std::vector<uint64_t> want, ParseShape("--shape", *shape));
    if (want != array.shape) {
      return UsageError(absl::StrCat("--shape=", *shape, " does not match the .npy file's ",
                                     absl::StrJoin(array.shape, "x")));
    }
  }
  return FileTensor{array.dtype, std::move(array.shape), std::move(array.data)};
}

absl::StatusOr<FileTensor> TensorFromRaw(const Context& ctx, std::string data) {
  FileTensor t;
  if (auto dtype = ctx.args.Get("dtype")) {
    ASSIGN_OR_RETURN(t.dtype, ParseDtypeFlag("--dtype", *dtype));
  }
  const uint64_t elem = ElemSize(t.dtype);
  if (auto shape = ctx.args.Get("shape")) {
    ASSIGN_OR_RETURN(t.shape, ParseShape("--shape", *shape));
  } else {
    t.shape = {data.size() / elem};
  }
  std::optional<uint64_t> elems = CheckedProduct(t.shape);
  std::optional<uint64_t> want = elems ? CheckedMul(*elems, elem) : std::nullopt;
  if (!want || *want != data.size() || *want == 0) {
    return UsageError(absl::StrCat("the file has ", data.size(), " bytes but shape ",
                                   absl::StrJoin(t.shape, "x"), " of ", ElemTypeName(t.dtype),
                                   " needs ", want ? absl::StrCat(*want) : "more"));
  }
  t.data = std::move(data);
  return t;
}

bool IsNpy(absl::string_view data) { return data.substr(0, 6) == absl::string_view("\x93NUMPY"); }

// One element of `data` (little-endian) as text; JSON-safe when `json`.
std::string FormatElement(ElemType dtype, const char* p, bool json) {
  std::string s;
  switch (dtype) {
    case ElemType::kF32: {
      float v;
      std::memcpy(&v, p, 4);
      if (!std::isfinite(v)) return json ? JsonQuote(absl::StrCat(v)) : absl::StrCat(v);
      return absl::StrFormat("%.9g", v);
    }
    case ElemType::kF64: {
      double v;
      std::memcpy(&v, p, 8);
      if (!std::isfinite(v)) return json ? JsonQuote(absl::StrCat(v)) : absl::StrCat(v);
      return absl::StrFormat("%.17g", v);
    }
    case ElemType::kI32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return absl::StrCat(v);
    }
    case ElemType::kU32: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      return absl::StrCat(v);
    }
    case ElemType::kI64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return absl::StrCat(v);
    }
    case ElemType::kF16:
    case ElemType::kBF16: {
      uint16_t bits;
      std::memcpy(&bits, p, 2);
      const float v = dtype == ElemType::kF16 ? static_cast<float>(Half::FromBits(bits))
                                              : static_cast<float>(BFloat16::FromBits(bits));
      if (!std::isfinite(v)) return json ? JsonQuote(absl::StrCat(v)) : absl::StrCat(v);
      return absl::StrFormat(dtype == ElemType::kF16 ? "%.5g" : "%.4g", v);
    }
    case ElemType::kI8:
      return absl::StrCat(static_cast<int>(static_cast<int8_t>(*p)));
    case ElemType::kU8:
      return absl::StrCat(static_cast<int>(static_cast<uint8_t>(*p)));
    case ElemType::kI16: {
      int16_t v;
      std::memcpy(&v, p, 2);
      return absl::StrCat(v);
    }
    case ElemType::kU16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return absl::StrCat(v);
    }
    case ElemType::kBool:
      return *p != 0 ? "true" : "false";
  }
  return "?";
}

constexpr uint64_t kReadChunk = uint64_t{4} << 20;

// The first `size` bytes of `handle`. Under a progress line, in kReadChunk pieces (one Read each,
// the line redrawn after each); else in one Read.
absl::StatusOr<std::string> ReadBytes(const Context& ctx, Client& client, const Handle& handle,
                                      uint64_t size) {
  if (!ShowProgress(ctx.global.quiet, size)) {
    ASSIGN_OR_RETURN(std::vector<std::string> out,
                     client.Read({Binding(handle, 0, handle.size() - size)}).get());
    return std::move(out.at(0));
  }
  ProgressLine progress("read", size, /*enabled=*/true);
  std::string data;
  data.reserve(size);
  for (uint64_t start = 0; start < size; start += kReadChunk) {
    const uint64_t end = std::min(size, start + kReadChunk);
    ASSIGN_OR_RETURN(std::vector<std::string> out,
                     client.Read({Binding(handle, start, handle.size() - end)}).get());
    data += out.at(0);
    progress.Update(end);
  }
  return data;
}

Field ValuesField(ElemType dtype, absl::string_view data) {
  std::vector<std::string> text, json;
  const size_t elem = ElemSize(dtype);
  for (size_t i = 0; i + elem <= data.size(); i += elem) {
    text.push_back(FormatElement(dtype, data.data() + i, false));
    json.push_back(FormatElement(dtype, data.data() + i, true));
  }
  return RawField("values", absl::StrJoin(text, " "),
                  absl::StrCat("[", absl::StrJoin(json, ", "), "]"));
}

}  // namespace

absl::Status CreateCommand(const Context& ctx) {
  const auto& words = ctx.args.positional();
  if (words.size() != 2) {
    return UsageError("usage: cubectl --session=ID create FILE [--shape=2x3 --dtype=f32]");
  }
  RETURN_IF_ERROR(RequireSession(ctx.global, "create"));
  ASSIGN_OR_RETURN(std::string data, ReadFileBytes(words[1]));
  const bool typed = IsNpy(data) || ctx.args.Has("shape") || ctx.args.Has("dtype");
  FileTensor file;
  if (IsNpy(data)) {
    ASSIGN_OR_RETURN(file, TensorFromNpy(ctx, std::move(data)));
  } else if (typed) {
    ASSIGN_OR_RETURN(file, TensorFromRaw(ctx, std::move(data)));
  } else {
    file.data = std::move(data);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Client> client, ConnectClient(ctx.global));
  const auto* bytes = reinterpret_cast<const uint8_t*>(file.data.data());
  std::vector<Field> fields;
  // The SDK sends a create in one call that reports no progress: the line shows the time so far.
  // Erased (reset) before the report is printed.
  std::optional<ProgressLine> progress;
  progress.emplace("create", file.data.size(), ShowProgress(ctx.global.quiet, file.data.size()));
  progress->TickUntilDone();
  if (typed) {
    ASSIGN_OR_RETURN(Tensor tensor, client->CreateTensor({bytes, file.data.size()}, file.shape,
                                                         ElemSize(file.dtype)));
    fields = {IdField("handle", tensor.handle.Detach()), SizeField("size", tensor.handle.size()),
              TextField("dtype", ElemTypeName(file.dtype)), ShapeField("shape", tensor.shape),
              RawField("strides", absl::StrJoin(tensor.strides, ", "),
                       absl::StrCat("[", absl::StrJoin(tensor.strides, ", "), "]"))};
  } else {
    ASSIGN_OR_RETURN(Handle handle, client->Create({bytes, file.data.size()}));
    fields = {IdField("handle", handle.Detach()), SizeField("size", handle.size())};
  }
  progress.reset();
  PrintReport(fields, ctx.global.json, *ctx.out);
  return absl::OkStatus();
}

absl::Status ReadCommand(const Context& ctx) {
  const auto& words = ctx.args.positional();
  if (words.size() != 2) {
    return UsageError(
        "usage: cubectl --session=ID read HANDLE [--shape=2x3 --dtype=f32] [-o FILE | --npy FILE]");
  }
  RETURN_IF_ERROR(RequireSession(ctx.global, "read"));
  ASSIGN_OR_RETURN(uint64_t id, ParseUint("HANDLE", words[1]));
  const std::optional<std::string> raw_path = ctx.args.Get("o");
  const std::optional<std::string> npy_path = ctx.args.Get("npy");
  if (raw_path && npy_path) return UsageError("read: give -o FILE or --npy FILE, not both");
  const bool typed = npy_path || ctx.args.Has("shape") || ctx.args.Has("dtype");
  if (!raw_path && !typed) {
    return UsageError("read: give -o FILE, --npy FILE, or --dtype to print the values");
  }

  ASSIGN_OR_RETURN(std::unique_ptr<Client> client, ConnectClient(ctx.global));
  std::vector<Field> fields = {IdField("handle", id)};
  std::string data;
  ElemType dtype = ElemType::kF32;
  std::vector<uint64_t> shape;
  if (typed) {
    if (auto text = ctx.args.Get("dtype")) {
      ASSIGN_OR_RETURN(dtype, ParseDtypeFlag("--dtype", *text));
    }
    if (auto text = ctx.args.Get("shape")) {
      ASSIGN_OR_RETURN(shape, ParseShape("--shape", *text));
    } else {
      ASSIGN_OR_RETURN(Handle handle, AttachHandle(*client, id));
      shape = {handle.size() / ElemSize(dtype)};
    }
    // A contiguous tensor from the handle's first byte (AttachTensor): its bytes in order.
    ASSIGN_OR_RETURN(Tensor tensor, AttachTensor(*client, id, shape, dtype));
    ASSIGN_OR_RETURN(
        data, ReadBytes(ctx, *client, tensor.handle, tensor.NumElements() * tensor.elem_size));
    fields.push_back(TextField("dtype", ElemTypeName(dtype)));
    fields.push_back(ShapeField("shape", shape));
  } else {
    ASSIGN_OR_RETURN(Handle handle, AttachHandle(*client, id));
    ASSIGN_OR_RETURN(data, ReadBytes(ctx, *client, handle, handle.size()));
  }
  fields.push_back(SizeField("bytes", data.size()));

  if (npy_path) {
    ASSIGN_OR_RETURN(std::string file, EncodeNpy(dtype, shape, data));
    RETURN_IF_ERROR(WriteFileBytes(*npy_path, file));
    fields.push_back(TextField("file", *npy_path));
  } else if (raw_path) {
    RETURN_IF_ERROR(WriteFileBytes(*raw_path, data));
    fields.push_back(TextField("file", *raw_path));
  } else {
    fields.push_back(ValuesField(dtype, data));
  }
  PrintReport(fields, ctx.global.json, *ctx.out);
  return absl::OkStatus();
}

}  // namespace cubed::cubectl
