#include "server/daemon/checkpoint_digest.h"

#include <openssl/evp.h>

#include <memory>
#include <utility>

#include "absl/status/status.h"

namespace cubed {

std::string Sha256(absl::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  // Fails only when libcrypto is out of memory: the digest then matches nothing.
  if (EVP_Digest(data.data(), data.size(), digest, &length, EVP_sha256(), nullptr) != 1) return "";
  return std::string(reinterpret_cast<const char*>(digest), length);
}

DigestThread::DigestThread() : thread_([this] { Run(); }) {}

DigestThread::~DigestThread() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void DigestThread::Add(absl::Span<const uint8_t> bytes, bool first, bool last) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(Piece{bytes, first, last});
}

absl::StatusOr<std::vector<std::string>> DigestThread::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](DigestThread* t)
           ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) { return t->queue_.empty() && !t->busy_; },
      this));
  if (failed_) return absl::InternalError("checkpoint: libcrypto failed computing a SHA-256");
  return std::exchange(done_, {});
}

void DigestThread::Run() {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  bool ok = ctx != nullptr;
  while (true) {
    Piece piece;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](DigestThread* t)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) { return !t->queue_.empty() || t->stop_; },
          this));
      if (queue_.empty()) return;  // Stopping, and nothing left.
      piece = queue_.front();
      queue_.pop_front();
      busy_ = true;
    }
    if (piece.first)
      ok = ctx != nullptr && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1;
    if (ok) ok = EVP_DigestUpdate(ctx.get(), piece.bytes.data(), piece.bytes.size()) == 1;
    std::string digest;
    if (ok && piece.last) {
      unsigned char out[EVP_MAX_MD_SIZE];
      unsigned int length = 0;
      ok = EVP_DigestFinal_ex(ctx.get(), out, &length) == 1;
      digest.assign(reinterpret_cast<const char*>(out), length);
    }
    absl::MutexLock lock(&mu_);
    busy_ = false;
    if (!ok) failed_ = true;
    if (piece.last) done_.push_back(std::move(digest));
  }
}

}  // namespace cubed
