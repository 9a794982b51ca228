#pragma once

// SHA-256 (FIPS 180-4), for content-addressed kernel cache keys: client code is untrusted, so the
// key must resist deliberate collisions. Small and dependency-free; not constant-time.

#include <array>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace cubed::kernels {

// Incremental hasher. Use once: Update(...)* then Digest().
class Sha256 {
 public:
  Sha256();
  void Update(absl::string_view data);
  // Appends `data` preceded by its length (8 bytes, little-endian), so that a sequence of fields
  // hashes unambiguously.
  void UpdateField(absl::string_view data);
  std::array<uint8_t, 32> Digest();
  // Lower-case hex of Digest().
  std::string HexDigest();

 private:
  void Block(const uint8_t* p);

  uint32_t h_[8];
  uint8_t buf_[64];
  uint64_t total_ = 0;  // Bytes hashed so far.
  size_t used_ = 0;     // Bytes in buf_.
};

}  // namespace cubed::kernels
