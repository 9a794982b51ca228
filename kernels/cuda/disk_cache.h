#pragma once

// The on-disk cache of compiled kernels: one file per cache key (<dir>/<key>.nvrtc) holding an
// NvrtcOutput, written atomically (a temporary file renamed into place) and checksummed, so that
// concurrent daemons never see a partial file and a corrupt or truncated one is simply a miss.

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernels/cuda/nvrtc_program.h"

namespace cubed::kernels {

// Serializes a record for `key` (a hex digest), with a trailing SHA-256 of its contents.
std::string EncodeCacheRecord(absl::string_view key, const NvrtcOutput& output);

// Parses a record written by EncodeCacheRecord for the same key; nullopt when the bytes are not
// exactly such a record (wrong magic, key, lengths or checksum).
std::optional<NvrtcOutput> DecodeCacheRecord(absl::string_view key, absl::string_view bytes);

// Files under one directory. Not thread-safe (owned like its compiler); several processes may
// share the directory.
class DiskCache {
 public:
  // `dir` is created (with parents) on the first Write.
  explicit DiskCache(std::string dir);

  // The record for `key`, or nullopt when it is absent or unreadable.
  std::optional<NvrtcOutput> Read(absl::string_view key) const;
  // Stores the record atomically. INTERNAL naming the path and errno text on I/O failure (the
  // caller may ignore it: the cache is an optimization).
  absl::Status Write(absl::string_view key, const NvrtcOutput& output);

  // Path of the record for `key`.
  std::string PathFor(absl::string_view key) const;

 private:
  std::string dir_;
  uint64_t temp_counter_ = 0;
};

}  // namespace cubed::kernels
