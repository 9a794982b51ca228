#pragma once

// The on-disk cache of compiled kernels: one file per cache key (<dir>/<key>.nvrtc) holding an
// NvrtcOutput, written atomically (a temporary file renamed into place) and checksummed, so that
// concurrent daemons never see a partial file and a corrupt or truncated one is simply a miss
// (so is anything else at the path: Note [Cache files are untrusted] in disk_cache.cc).

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
  // Records larger than this are neither read nor written (Note [Cache files are untrusted]).
  static constexpr uint64_t kDefaultMaxRecordBytes = uint64_t{1} << 30;

  // `dir` is created (with parents) on the first Write.
  explicit DiskCache(std::string dir, uint64_t max_record_bytes = kDefaultMaxRecordBytes);

  // The record for `key`, or nullopt when it is absent, unreadable, damaged, too large or not a
  // regular file. Never blocks on what is at the path.
  std::optional<NvrtcOutput> Read(absl::string_view key) const;
  // Stores the record atomically. INTERNAL naming the path and errno text on I/O failure,
  // INVALID_ARGUMENT for a record over the size limit (the caller may ignore either: the cache is
  // an optimization).
  absl::Status Write(absl::string_view key, const NvrtcOutput& output);

  // Path of the record for `key`.
  std::string PathFor(absl::string_view key) const;

 private:
  std::string dir_;
  uint64_t max_record_bytes_;
};

}  // namespace cubed::kernels
