#pragma once

// SharedMemory: memory of this process that a cubed daemon on the same host can map, for the
// shared-memory data path (docs/api.md, "Shared-memory regions"; Note [Shared-memory regions] in
// server/channel/shared_region.h). It is a memfd sealed against shrinking, so the daemon can
// trust that its mapping never loses pages; registering it with a session (Client::
// RegisterRegion) passes the descriptor over the daemon's region socket.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace cubed {

// Move-only; unmaps and closes its descriptor when destroyed (a daemon that mapped it keeps its
// own mapping until the region is released or the session ends). The bytes may be read and
// written from any thread; what the daemon reads or writes follows the rules of docs/api.md.
class SharedMemory {
 public:
  // `size` bytes (1 .. 2^62), zero-filled, mapped read-write; `name` shows in /proc/PID/maps
  // as "memfd:NAME". INVALID_ARGUMENT for a size of 0; the system's error (memfd_create,
  // ftruncate, fcntl, mmap) otherwise.
  static absl::StatusOr<SharedMemory> Create(uint64_t size, const char* name = "cubed-region");

  SharedMemory(SharedMemory&& other) noexcept;
  SharedMemory& operator=(SharedMemory&& other) noexcept;
  ~SharedMemory();

  uint64_t size() const { return size_; }
  absl::Span<uint8_t> bytes() const { return absl::MakeSpan(base_, size_); }
  // The memfd (owned by this object), for passing to a daemon.
  int fd() const { return fd_; }

 private:
  SharedMemory(int fd, uint8_t* base, uint64_t size) : fd_(fd), base_(base), size_(size) {}
  void Reset();

  int fd_ = -1;
  uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
};

// Registers `memory` for `session` with the daemon whose region socket is `region_socket` (the
// daemon's Unix socket path plus ".regions"; proto/cubed/v1/region.proto) and returns the
// region's id in the session. One connection per call, closed before it returns. The daemon's
// error as its status (NOT_FOUND: session; INVALID_ARGUMENT: the memory; PERMISSION_DENIED);
// UNAVAILABLE when the socket cannot be reached.
absl::StatusOr<uint64_t> RegisterSharedMemory(const std::string& region_socket, uint64_t session,
                                              const SharedMemory& memory);

}  // namespace cubed
