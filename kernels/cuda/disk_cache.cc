#include "kernels/cuda/disk_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/crypto/sha256.h"

namespace cubed::kernels {
namespace {

// Numbers temporary files across every DiskCache of the process: the devices of one daemon
// (--devices) each have their own cache over the same directory, and may write the same
// kernel at once.
std::atomic<uint64_t> temp_counter{0};

constexpr absl::string_view kMagic = "CUBEDNV1";
constexpr size_t kDigestBytes = Sha256::kDigestBytes;
constexpr uint64_t kMaxField = uint64_t{1} << 32;  // Larger than any image NVRTC produces.
// Note [Cache files are untrusted]
// The cache directory may be shared and anything may appear at a record's path: a FIFO (whose
// open would block the compiler thread until a writer came), a device, a directory, a huge
// file. Read opens without blocking, reads only a regular file of at most the cache's
// max_record_bytes (1 GiB by default), and treats everything else as a miss; Write never stores
// a record Read would refuse.

void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
void PutField(std::string* out, absl::string_view s) {
  PutU64(out, s.size());
  out->append(s.data(), s.size());
}

// Reads fields front to back; any overrun makes ok() false.
class Reader {
 public:
  explicit Reader(absl::string_view data) : data_(data) {}
  bool ok() const { return ok_; }
  bool done() const { return data_.empty(); }
  uint64_t U64() {
    if (data_.size() < 8) return Fail();
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<uint8_t>(data_[i])} << (8 * i);
    data_.remove_prefix(8);
    return v;
  }
  std::string Field() {
    const uint64_t n = U64();
    if (!ok_ || n > kMaxField || n > data_.size()) {
      Fail();
      return "";
    }
    std::string s(data_.substr(0, n));
    data_.remove_prefix(n);
    return s;
  }

 private:
  uint64_t Fail() {
    ok_ = false;
    data_ = {};
    return 0;
  }
  absl::string_view data_;
  bool ok_ = true;
};

// The record's digest; empty when libcrypto failed, which no stored digest matches (a record
// written then is shorter than any valid one): the kernel is compiled anew, never mistaken.
std::string Digest(absl::string_view bytes) {
  absl::StatusOr<std::string> d = Sha256::Of(bytes);
  return d.ok() ? *std::move(d) : std::string();
}

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

absl::Status MakeDirs(const std::string& dir) {
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    const std::string prefix = dir.substr(0, pos);
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoError("cannot create kernel cache directory", prefix);
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string EncodeCacheRecord(absl::string_view key, const NvrtcOutput& output) {
  std::string out(kMagic);
  PutField(&out, key);
  PutU64(&out, output.is_cubin ? 1 : 0);
  PutField(&out, output.log);
  PutU64(&out, output.lowered.size());
  for (const auto& [expression, lowered] : output.lowered) {
    PutField(&out, expression);
    PutField(&out, lowered);
  }
  PutField(&out, output.image);
  out += Digest(out);
  return out;
}

std::optional<NvrtcOutput> DecodeCacheRecord(absl::string_view key, absl::string_view bytes) {
  if (bytes.size() < kMagic.size() + kDigestBytes || bytes.substr(0, kMagic.size()) != kMagic) {
    return std::nullopt;
  }
  const absl::string_view body = bytes.substr(0, bytes.size() - kDigestBytes);
  if (Digest(body) != bytes.substr(body.size())) return std::nullopt;
  Reader r(body.substr(kMagic.size()));
  if (r.Field() != key) return std::nullopt;
  NvrtcOutput out;
  out.is_cubin = r.U64() == 1;
  out.log = r.Field();
  const uint64_t names = r.U64();
  for (uint64_t i = 0; r.ok() && i < names; ++i) {
    std::string expression = r.Field();
    std::string lowered = r.Field();
    out.lowered.emplace_back(std::move(expression), std::move(lowered));
  }
  out.image = r.Field();
  if (!r.ok() || !r.done() || out.image.empty()) return std::nullopt;
  return out;
}

DiskCache::DiskCache(std::string dir, uint64_t max_record_bytes)
    : dir_(std::move(dir)), max_record_bytes_(max_record_bytes) {
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
}

std::string DiskCache::PathFor(absl::string_view key) const {
  return absl::StrCat(dir_, "/", key, ".nvrtc");
}

std::optional<NvrtcOutput> DiskCache::Read(absl::string_view key) const {
  const std::string path = PathFor(key);
  // Note [Cache files are untrusted].
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return std::nullopt;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 0 ||
      static_cast<uint64_t>(st.st_size) > max_record_bytes_) {
    close(fd);
    return std::nullopt;
  }
  std::string bytes;
  char buf[1 << 16];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || bytes.size() + static_cast<size_t>(n) > max_record_bytes_) break;  // Grew.
    bytes.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  if (n != 0) return std::nullopt;
  return DecodeCacheRecord(key, bytes);
}

absl::Status DiskCache::Write(absl::string_view key, const NvrtcOutput& output) {
  if (absl::Status s = MakeDirs(dir_); !s.ok()) return s;
  const std::string path = PathFor(key);
  const std::string temp = absl::StrCat(path, ".tmp.", getpid(), ".",
                                        temp_counter.fetch_add(1, std::memory_order_relaxed));
  const std::string bytes = EncodeCacheRecord(key, output);
  if (bytes.size() > max_record_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat("kernel cache record of ", bytes.size(),
                                                   " bytes for ", path, " exceeds the ",
                                                   max_record_bytes_, "-byte limit"));
  }
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", temp);
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const absl::Status s = ErrnoError("cannot write", temp);
      close(fd);
      unlink(temp.c_str());
      return s;
    }
    written += static_cast<size_t>(n);
  }
  if (close(fd) != 0) {
    const absl::Status s = ErrnoError("cannot close", temp);
    unlink(temp.c_str());
    return s;
  }
  if (rename(temp.c_str(), path.c_str()) != 0) {
    const absl::Status s = ErrnoError("cannot rename into", path);
    unlink(temp.c_str());
    return s;
  }
  return absl::OkStatus();
}

}  // namespace cubed::kernels
