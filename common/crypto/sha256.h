#pragma once

// SHA-256 over libcrypto (OpenSSL's EVP digests): the kernel cache's content-addressed keys and
// records (kernels/cuda/), whose inputs are untrusted client code, so the hash must resist
// deliberate collisions; and a checkpoint's digests (server/daemon/). A layer of its own so that
// cubed_common, which the C++ SDK installs, does not link OpenSSL.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

typedef struct evp_md_ctx_st EVP_MD_CTX;

namespace cubed {

// An incremental hasher: Update (or UpdateField) any number of times, then Finish, which starts
// the next string. Not thread-safe: one thread at a time. Failures of libcrypto (out of memory)
// are remembered and reported by Finish, never by a crash.
class Sha256 {
 public:
  static constexpr size_t kDigestBytes = 32;

  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(absl::string_view data);
  void Update(absl::Span<const uint8_t> data);
  // Appends `data` preceded by its length (8 bytes, little-endian), so that a sequence of fields
  // hashes unambiguously ("ab", "c" differs from "a", "bc").
  void UpdateField(absl::string_view data);
  // Drops what was added: the next Update starts a new string.
  void Reset();
  // The digest (kDigestBytes bytes) of what was added since construction or the last Finish or
  // Reset; the hasher then starts anew. INTERNAL when libcrypto failed at any step since.
  absl::StatusOr<std::string> Finish();

  // The digest of `data` alone; INTERNAL as Finish.
  static absl::StatusOr<std::string> Of(absl::string_view data);

 private:
  EVP_MD_CTX* ctx_;
  bool ok_ = false;  // Every libcrypto call since the string began succeeded.
};

}  // namespace cubed
