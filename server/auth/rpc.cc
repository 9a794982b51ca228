#include "server/auth/rpc.h"

namespace cubed {
namespace {

constexpr absl::string_view kMethodNames[] = {
    "OpenSession", "CloseSession",  "Create",       "CreateTensor", "Empty",   "EmptyTensor",
    "Read",        "ReadTensor",    "GetResource",  "Execute",      "Flush",   "Sync",
    "MemoryUsage", "MemoryCleanup", "StartProfile", "EndProfile",   "GetInfo", "Release",
    "GetStats",    "Drain",         "ImportMemory", "CopyToDevice", "Session"};
static_assert(sizeof(kMethodNames) / sizeof(kMethodNames[0]) ==
              static_cast<size_t>(Method::kCount));

}  // namespace

absl::string_view MethodName(Method method) {
  const int i = static_cast<int>(method);
  if (i < 0 || i >= static_cast<int>(Method::kCount)) return "unknown";
  return kMethodNames[i];
}

bool IsComputeRpcName(absl::string_view rpc) {
  for (int i = 0; i < static_cast<int>(Method::kSession); ++i) {
    if (kMethodNames[i] == rpc) return true;
  }
  return false;
}

}  // namespace cubed
