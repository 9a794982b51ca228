#pragma once

// SharedRegion: a local client's shared memory, mapped into the daemon.
//
// Note [Shared-memory regions]: a client on the daemon's host creates memory with memfd_create
// (MFD_ALLOW_SEALING), sizes it, seals it against shrinking (F_SEAL_SHRINK) and passes the file
// descriptor over the region socket (SCM_RIGHTS; server/service/region_listener.h). There are no
// names, paths or keys: only a process that holds the descriptor can name the memory, and the
// daemon learns it only from a connection whose peer credentials it checked. The region belongs
// to one session (its id means nothing in another) and is unmapped when the session closes or
// the client unregisters it. Creates read their bytes from a region and reads write theirs into
// one, so data moves with one copy and no gRPC message.
//
// The client keeps the memory mapped and may change it at any moment, so the daemon treats a
// region as bytes only: nothing read from it is interpreted, and every (offset, size) is checked
// against the region's size on every use. What could hurt the daemon is a mapping that loses its
// pages, which would turn an access into SIGBUS; the seal rules that out: a file sealed with
// F_SEAL_SHRINK can never become smaller than the mapping. Refused, each with its reason:
// descriptors that are not sealable memory (a plain file, a socket, /dev/shm from shm_open),
// without F_SEAL_SHRINK, sealed against writes (reads must land in it), hugetlbfs memory (a fault
// without a free huge page raises SIGBUS), and sizes of 0 or over the daemon's limit.

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace cubed {

// A device's shared-memory region traffic (for metrics and GetStats).
struct RegionTraffic {
  uint64_t live = 0;           // Registered by open sessions now.
  uint64_t registered = 0;     // Registered since the device started.
  uint64_t bytes_created = 0;  // Taken by creates.
  uint64_t bytes_read = 0;     // Written by reads (counted when queued).
};

// Owned by the session that registered it; used on the device's loop thread (Map on any).
class SharedRegion {
 public:
  // Maps the memory behind `fd`, which it takes: `fd` is closed when Map returns, mapped or not
  // (the mapping keeps the memory alive). INVALID_ARGUMENT for a descriptor refused above, or a
  // size over `max_bytes`, with the reason; INTERNAL when mmap fails for another reason.
  static absl::StatusOr<std::unique_ptr<SharedRegion>> Map(int fd, uint64_t max_bytes);

  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;
  ~SharedRegion();  // Unmaps.

  uint64_t size() const { return size_; }
  // The whole mapping. The client may change its bytes at any time.
  absl::Span<uint8_t> bytes() const { return absl::MakeSpan(base_, size_); }

  // The bytes [offset, offset + size) of the region; INVALID_ARGUMENT naming `field` when the
  // range is empty or does not lie inside the region (checked without overflow).
  absl::StatusOr<absl::Span<uint8_t>> Slice(uint64_t offset, uint64_t size,
                                            absl::string_view field) const;

 private:
  SharedRegion(uint8_t* base, uint64_t size) : base_(base), size_(size) {}

  uint8_t* base_;
  uint64_t size_;
};

}  // namespace cubed
