#pragma once

// RegionStaging: the staging region behind the C++ SDK's automatic shared-memory path
// (ClientOptions::region_threshold; docs/api.md, "Shared-memory regions"). A Create or Read of a
// large buffer copies its bytes into or out of this region instead of sending them through gRPC.
// One user at a time: Acquire waits until the previous user has released it.

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "client/client.h"

namespace cubed {

// Thread-safe. `client` owns it and outlives it.
class RegionStaging {
 public:
  explicit RegionStaging(Client& client) : client_(client) {}

  // Waits until the region is free, takes it and returns it, at least `bytes` large (a larger one
  // replaces a smaller, which is released after the commands that used it). nullptr when the
  // daemon refuses regions (no region socket, say): then the path stays off for this client and
  // there is nothing to Release.
  const Region* Acquire(uint64_t bytes);
  // Frees the region for the next user; from any thread (a read's completion).
  void Release();

 private:
  bool Available() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !busy_ || off_; }

  Client& client_;
  absl::Mutex mu_;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool off_ ABSL_GUARDED_BY(mu_) = false;
  // Touched only by the holder (between Acquire and Release).
  std::optional<Region> region_;
};

}  // namespace cubed
