#pragma once

// Note [Encoded executes]: the C++ SDK's stream executes are written as wire bytes directly, the
// way protobuf would serialize the Command (byte for byte: execute_encoding_test.cc), instead of
// being built as protobuf messages on a stack arena and serialized: P2 over TCP on the 2-core VM
// spent ~1.1 µs of the SDK's calling thread a command, half of it in the arena's allocations,
// their thread-local lookups and the serialization walk (perf, 2026-12-07). The daemon's fast
// decoder reads the same form straight back (Note [Fast execute decode],
// server/service/stream/execute_decoder.h). The C ABI's prepared launches (Note [Prepared C ABI
// launches]) are the Python SDK's form of the same idea, with the fixed parts cached.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "client/client.h"

namespace cubed {

// A Bindings.buffers entry (its tag, a one-byte length and the Binding's non-zero fields, as
// protobuf serializes it): its size, at most kMaxBufferEntryBytes, and its bytes written at `at`
// (returns their end). Shared with the C ABI's prepared launches (cubed_client_c_launch.cc).
inline constexpr size_t kMaxBufferEntryBytes = 2 + 3 * (1 + 10);
size_t BufferEntrySize(uint64_t handle, uint64_t offset_start, uint64_t offset_end);
uint8_t* WriteBufferEntry(uint64_t handle, uint64_t offset_start, uint64_t offset_end, uint8_t* at);

// Appends to `out` the serialized cubed.v1.Command (without its seq, which the transport adds:
// AppendSerializedCommandBytes) of an execute of the builtin `kernel` with a static `count`,
// `buffers`, `metadata`, `scalars` and `mode`: the bytes protobuf's SerializeToString gives for
// that message. INVALID_ARGUMENT, with `out` unchanged, for a binding with an empty handle or
// scalars in a value list other than their type's (as ToProto refuses them). Pure; any thread.
absl::Status AppendExecuteCommand(const BuiltinKernel& kernel, CubeCount count,
                                  absl::Span<const Binding> buffers,
                                  absl::Span<const uint32_t> metadata,
                                  absl::Span<const Scalars> scalars, ExecutionMode mode,
                                  std::string* out);

}  // namespace cubed
