#pragma once

// SHA-256 for content-addressed kernel cache keys: client code is untrusted, so the key must
// resist deliberate collisions. A thin wrapper over OpenSSL's EVP digest (libcrypto, already
// linked by gRPC), which adds the length-prefixed fields the cache keys are built from.

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"

typedef struct evp_md_ctx_st EVP_MD_CTX;

namespace cubed::kernels {

// Incremental hasher. Use once: Update(...)* then Digest(). Not thread-safe. Aborts only if
// libcrypto cannot allocate its context or lacks SHA-256 (neither happens in a working OpenSSL).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(absl::string_view data);
  // Appends `data` preceded by its length (8 bytes, little-endian), so that a sequence of fields
  // hashes unambiguously.
  void UpdateField(absl::string_view data);
  std::array<uint8_t, 32> Digest();
  // Lower-case hex of Digest().
  std::string HexDigest();

 private:
  EVP_MD_CTX* ctx_;
};

}  // namespace cubed::kernels
