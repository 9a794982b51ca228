#pragma once

// Plain C++ forms of the requests that reach a Device, after the service edge has checked their
// structure (request_conversion.h). Handle ids are still unresolved: only the Device knows a
// session's handles.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "common/ids.h"
#include "server/compute/compute_server.h"

namespace cubed {

// Handle ids a command names (what an execute writes, say): inline up to four, so that a
// typical command allocates none on its way to the loop.
using HandleList = absl::InlinedVector<HandleId, 4>;

// A wire Binding: a session handle id and byte offsets, not yet checked against the handle.
struct BindingRef {
  HandleId handle;
  uint64_t offset_start = 0;
  uint64_t offset_end = 0;
};

// A wire RegionSlice: a byte range of one of the session's shared-memory regions, not yet
// checked against the region (Note [Shared-memory regions], shared_region.h).
struct RegionRange {
  RegionId region;
  uint64_t offset = 0;
  uint64_t size = 0;
};

// A wire BindingWithMeta; shape and strides already checked for rank, overflow and elem_size.
struct TensorRef {
  BindingRef binding;
  std::vector<uint64_t> shape;
  std::vector<uint64_t> strides;
  uint32_t elem_size = 0;
};

struct ExecuteCommand {
  KernelCall kernel;
  bool dynamic_count = false;
  uint32_t count[3] = {1, 1, 1};               // Static count, checked against the device's limits.
  BindingRef count_binding;                    // Dynamic count.
  absl::InlinedVector<BindingRef, 4> buffers;  // Inline: no allocation per command.
  bool unchecked = false;
};

// A wire ImportMemoryRequest's source (Note [Imported memory], compute_server.h): a range of
// one of the session's regions (`from_region`) or of another process's CUDA allocation; not yet
// checked beyond the presence of one of them.
struct ImportCommand {
  bool from_region = false;
  RegionRange region;
  std::string ipc_handle;  // CUDA: cuIpcGetMemHandle's 64 bytes.
  uint64_t offset = 0;     // CUDA: bytes into the allocation.
  uint64_t size = 0;       // CUDA: bytes of the range.
  std::string device_uuid;
};

// A new handle as returned to the client.
struct NewHandle {
  HandleId handle;
  uint64_t size = 0;
  std::vector<uint64_t> strides;  // Tensors only.
};

}  // namespace cubed
