#include "kernels/cuda/sha256.h"

#include <openssl/evp.h>

#include <cstdlib>

#include "absl/strings/escaping.h"

namespace cubed::kernels {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  // Both fail only when libcrypto is out of memory or built without SHA-256: not a request error.
  if (ctx_ == nullptr || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) std::abort();
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }

void Sha256::Update(absl::string_view data) {
  if (!data.empty()) EVP_DigestUpdate(ctx_, data.data(), data.size());
}

void Sha256::UpdateField(absl::string_view data) {
  uint8_t length[8];
  const uint64_t n = data.size();
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(n >> (8 * i));
  Update(absl::string_view(reinterpret_cast<const char*>(length), sizeof(length)));
  Update(data);
}

std::array<uint8_t, 32> Sha256::Digest() {
  std::array<uint8_t, 32> out{};
  unsigned int size = 0;
  EVP_DigestFinal_ex(ctx_, out.data(), &size);
  return out;
}

std::string Sha256::HexDigest() {
  const std::array<uint8_t, 32> d = Digest();
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(d.data()), d.size()));
}

}  // namespace cubed::kernels
