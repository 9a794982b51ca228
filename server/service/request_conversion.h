#pragma once

// Validation and conversion of wire requests into plain commands: the single place where
// protobuf types become C++ structs on the way in (and the fuzz target). Everything that can be
// checked without the handle tables is checked here, with overflow-safe arithmetic; errors are
// INVALID_ARGUMENT naming the field and the bound (UNIMPLEMENTED for kernel kinds the wire
// allows but no backend has yet).

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "cubed/v1/compute.pb.h"
#include "server/channel/commands.h"

namespace cubed {

// Bounds on request sizes, from the daemon's configuration.
struct RequestLimits {
  uint32_t max_bindings = 1024;  // Read/ReadTensor bindings.
  uint32_t max_buffers = 64;     // Execute buffers.
  uint32_t max_metadata_words = 65536;
  uint32_t max_release = 65536;
  uint64_t max_code_bytes = 4 << 20;  // cuda_source / ptx text.
};

// Checks a tensor shape: 1 .. kMaxRank dims, each >= 1, elem_size 1 .. 16, and the byte size
// product(shape) * elem_size fits in 63 bits. Returns that byte size.
absl::StatusOr<uint64_t> CheckTensorShape(absl::Span<const uint64_t> shape, uint32_t elem_size,
                                          absl::string_view field);

// An execute's parts as plain values, for the conversions below that both protobuf's parse
// (ToExecuteCommand) and the session stream's fast execute decoder (Note [Fast execute decode],
// server/service/stream/execute_decoder.h) go through, so that the checks and their errors exist
// once. Enum fields carry the wire's number, checked here; views point into the caller's memory.
struct BuiltinKernelFields {
  absl::string_view name;
  int dtype = 0;
  int out_dtype = 0;
  uint32_t axis = 0;
  int index_dtype = 0;
  bool allow_tf32 = false;
};
struct ScalarGroupFields {
  int elem = 0;
  absl::Span<const double> floats;
  absl::Span<const int64_t> ints;
  absl::Span<const uint64_t> uints;
};

// Fills `call` (default-constructed) from a builtin kernel's fields; INVALID_ARGUMENT naming the
// field (kernel.builtin.*) otherwise.
absl::Status ToBuiltinCall(const BuiltinKernelFields& fields, kernels::BuiltinCall& call);
// Converts bindings.scalars[`index`] and appends it to `groups`; INVALID_ARGUMENT for values in
// the wrong list or out of the type's range, or a second group of one type.
absl::Status AppendScalarGroup(const ScalarGroupFields& group, int index,
                               kernels::ScalarGroups& groups);
// An execute's mode (sets command.unchecked) and the counts of its buffers and metadata words
// against `limits`, checked in this order.
absl::Status CheckExecuteFields(int mode, size_t buffers, size_t metadata_words,
                                const RequestLimits& limits, ExecuteCommand& command);

BindingRef ToBindingRef(const v1::Binding& binding);

absl::StatusOr<std::vector<BindingRef>> ToReadBindings(const v1::ReadRequest& request,
                                                       const RequestLimits& limits);
absl::StatusOr<std::vector<TensorRef>> ToTensorRefs(const v1::ReadTensorRequest& request,
                                                    const RequestLimits& limits);
absl::StatusOr<ExecuteCommand> ToExecuteCommand(const v1::ExecuteRequest& request,
                                                const RequestLimits& limits);
// The same from the parts of an execute (the session stream's Command.Execute), filling
// `command` (default-constructed) in place; errors as above. `mode`: a v1::ExecutionMode value.
absl::Status ToExecuteCommand(const v1::Kernel& kernel, const v1::CubeCount& count,
                              const v1::Bindings& bindings, int mode, const RequestLimits& limits,
                              ExecuteCommand& command);
// Checks CreateTensor: shape as above and len(data) == product(shape) * elem_size.
absl::Status CheckCreateTensor(const v1::CreateTensorRequest& request);
absl::Status CheckRelease(const v1::ReleaseRequest& request, const RequestLimits& limits);
// ImportMemory's source (Note [Imported memory], server/compute/compute_server.h);
// INVALID_ARGUMENT when neither cuda_ipc nor region is set. Everything else the Device and the
// backend check.
absl::StatusOr<ImportCommand> ToImportCommand(const v1::ImportMemoryRequest& request);

}  // namespace cubed
