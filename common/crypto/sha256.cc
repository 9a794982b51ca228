#include "common/crypto/sha256.h"

#include <openssl/evp.h>

#include "absl/status/status.h"

namespace cubed {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) { Reset(); }

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }

void Sha256::Reset() {
  ok_ = ctx_ != nullptr && EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) == 1;
}

void Sha256::Update(absl::string_view data) {
  if (ok_ && !data.empty()) ok_ = EVP_DigestUpdate(ctx_, data.data(), data.size()) == 1;
}

void Sha256::Update(absl::Span<const uint8_t> data) {
  Update(absl::string_view(reinterpret_cast<const char*>(data.data()), data.size()));
}

void Sha256::UpdateField(absl::string_view data) {
  char length[8];
  const uint64_t n = data.size();
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>(static_cast<uint8_t>(n >> (8 * i)));
  Update(absl::string_view(length, sizeof(length)));
  Update(data);
}

absl::StatusOr<std::string> Sha256::Finish() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  const bool ok = ok_ && EVP_DigestFinal_ex(ctx_, digest, &size) == 1 && size == kDigestBytes;
  Reset();
  if (!ok) return absl::InternalError("SHA-256: libcrypto failed (out of memory?)");
  return std::string(reinterpret_cast<const char*>(digest), size);
}

absl::StatusOr<std::string> Sha256::Of(absl::string_view data) {
  Sha256 h;
  h.Update(data);
  return h.Finish();
}

}  // namespace cubed
