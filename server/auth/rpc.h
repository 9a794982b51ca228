#pragma once

// The RPC methods the daemon serves, listed once: cubed.v1.Compute's unary methods in the order
// of compute.proto, then cubed.v1.SessionStream's Session. Permissions (principal.h) name them,
// the metrics count by them, the stream maps its commands onto them. A test of the service
// layer checks the list against the proto's descriptors.

#include "absl/strings/string_view.h"

namespace cubed {

enum class Method {
  kOpenSession,
  kCloseSession,
  kCreate,
  kCreateTensor,
  kEmpty,
  kEmptyTensor,
  kRead,
  kReadTensor,
  kGetResource,
  kExecute,
  kFlush,
  kSync,
  kMemoryUsage,
  kMemoryCleanup,
  kStartProfile,
  kEndProfile,
  kGetInfo,
  kRelease,
  kGetStats,
  kDrain,
  kImportMemory,
  kCopyToDevice,
  kSession,
  kCount,  // Not a method: the number of them.
};

// The method's name as in the proto ("Create"); "unknown" for kCount.
absl::string_view MethodName(Method method);

// Whether `rpc` names a method of cubed.v1.Compute (every Method but kSession): what a
// Permissions.rpcs entry may list.
bool IsComputeRpcName(absl::string_view rpc);

}  // namespace cubed
