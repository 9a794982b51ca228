#include "server/daemon/checkpoint_file.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/checked_math.h"
#include "common/status_macros.h"
#include "cubed/v1/checkpoint.pb.h"

namespace cubed {
namespace {

constexpr char kManifestName[] = "manifest";
constexpr char kDataName[] = "data";
constexpr char kTempSuffix[] = ".tmp";
constexpr uint32_t kFormatVersion = 1;
constexpr uint64_t kMaxManifestBytes = uint64_t{256} << 20;
constexpr size_t kDigestBytes = 32;
constexpr size_t kMaxPoisonMessage = 64 << 10;

std::string Sha256(absl::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  // Fails only when libcrypto is out of memory: the digest then matches nothing.
  if (EVP_Digest(data.data(), data.size(), digest, &length, EVP_sha256(), nullptr) != 1) return "";
  return std::string(reinterpret_cast<const char*>(digest), length);
}

std::string ErrnoText(int error) { return std::strerror(error); }

// ENOSPC and EFBIG (a file-size limit) are a full disk to the caller; the rest is I/O trouble.
absl::Status WriteError(const std::string& path, int error) {
  if (error == ENOSPC || error == EFBIG || error == EDQUOT) {
    return absl::ResourceExhaustedError(
        absl::StrCat("checkpoint: writing ", path, ": ", ErrnoText(error), " (disk full?)"));
  }
  return absl::InternalError(absl::StrCat("checkpoint: writing ", path, ": ", ErrnoText(error)));
}

// A file opened 0600 for writing; Close syncs it.
class OutFile {
 public:
  static absl::StatusOr<OutFile> Create(const std::string& path) {
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return WriteError(path, errno);
    if (fchmod(fd, 0600) != 0) {
      const int error = errno;
      close(fd);
      return WriteError(path, error);
    }
    return OutFile(path, fd);
  }
  OutFile(OutFile&& other) noexcept : path_(std::move(other.path_)), fd_(other.fd_) {
    other.fd_ = -1;
  }
  ~OutFile() {
    if (fd_ >= 0) close(fd_);
  }
  absl::Status Write(absl::string_view data) {
    while (!data.empty()) {
      const ssize_t n = write(fd_, data.data(), data.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return WriteError(path_, n < 0 ? errno : ENOSPC);
      data.remove_prefix(static_cast<size_t>(n));
    }
    return absl::OkStatus();
  }
  absl::Status Close() {
    const int fd = std::exchange(fd_, -1);
    if (fsync(fd) != 0) {
      const int error = errno;
      close(fd);
      return WriteError(path_, error);
    }
    if (close(fd) != 0) return WriteError(path_, errno);
    return absl::OkStatus();
  }

 private:
  OutFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_;
};

// Creates `dir` 0700 (and its parents) when missing; an existing one must be a directory of
// ours, and is made 0700.
absl::Status PrepareDirectory(const std::string& dir) {
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) {
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint: ", dir, ": ", ErrnoText(errno)));
    }
    std::error_code ec;
    const std::filesystem::path parent = std::filesystem::path(dir).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    if (mkdir(dir.c_str(), 0700) != 0 || lstat(dir.c_str(), &st) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint: cannot create directory ", dir, ": ", ErrnoText(errno)));
    }
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint: ", dir, " exists and is not a directory"));
  }
  if (st.st_uid != geteuid()) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint: ", dir, " belongs to uid ",
                                                      st.st_uid, ", not the daemon's (", geteuid(),
                                                      ")"));
  }
  if (chmod(dir.c_str(), 0700) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint: cannot make ", dir, " 0700: ", ErrnoText(errno)));
  }
  return absl::OkStatus();
}

void SyncDirectory(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)fsync(fd);
  close(fd);
}

// The manifest of `sessions`, their handles laid out one after the other in the data file.
absl::StatusOr<v1::CheckpointManifest> BuildManifest(
    const std::vector<CheckpointedSession>& sessions) {
  v1::CheckpointManifest manifest;
  manifest.set_created_unix_ms(absl::ToUnixMillis(absl::Now()));
  manifest.set_daemon_version(CUBED_VERSION);
  uint64_t offset = 0;
  for (const CheckpointedSession& s : sessions) {
    v1::CheckpointSession* out = manifest.add_sessions();
    out->set_id(s.id.value());
    out->set_device(s.device);
    out->set_owner(s.owner_name);
    out->set_lease_ms(static_cast<uint64_t>(absl::ToInt64Milliseconds(s.lease)));
    out->set_stream_seq(s.stream_seq);
    for (const CheckpointedHandle& h : s.handles) {
      if (h.bytes.size() != h.size) {
        return absl::InternalError(absl::StrCat("checkpoint: handle ", h.id.value(), " read ",
                                                h.bytes.size(), " bytes of ", h.size));
      }
      v1::CheckpointHandle* handle = out->add_handles();
      handle->set_id(h.id.value());
      handle->set_size(h.size);
      handle->set_refcount(h.refcount);
      handle->set_data_offset(offset);
      handle->set_sha256(Sha256(h.bytes));
      offset += h.size;  // Bytes held in memory: their sum fits.
    }
    for (const CheckpointedPoison& p : s.poisons) {
      v1::CheckpointPoison* poison = out->add_poisons();
      poison->set_id(p.id.value());
      poison->set_code(static_cast<uint32_t>(p.error.code()));
      poison->set_message(std::string(p.error.message().substr(0, kMaxPoisonMessage)));
    }
  }
  manifest.set_data_size(offset);
  return manifest;
}

}  // namespace

absl::StatusOr<CheckpointStats> WriteCheckpoint(const std::string& dir,
                                                const std::vector<CheckpointedSession>& sessions,
                                                uint64_t max_bytes) {
  ASSIGN_OR_RETURN(const v1::CheckpointManifest manifest, BuildManifest(sessions));
  v1::CheckpointFile file;
  file.set_version(kFormatVersion);
  file.set_manifest(manifest.SerializeAsString());
  file.set_manifest_sha256(Sha256(file.manifest()));
  const std::string manifest_bytes = file.SerializeAsString();
  CheckpointStats stats;
  stats.sessions = sessions.size();
  for (const CheckpointedSession& s : sessions) stats.handles += s.handles.size();
  stats.bytes = manifest.data_size() + manifest_bytes.size();  // Both in memory: no overflow.
  if (stats.bytes > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "checkpoint of ", stats.sessions, " sessions (", stats.handles, " handles) takes ",
        stats.bytes, " bytes, more than --checkpoint_max_bytes=", max_bytes, ": nothing written"));
  }
  RETURN_IF_ERROR(PrepareDirectory(dir));
  const std::string data_path = absl::StrCat(dir, "/", kDataName);
  const std::string manifest_path = absl::StrCat(dir, "/", kManifestName);
  const std::string data_temp = data_path + kTempSuffix;
  const std::string manifest_temp = manifest_path + kTempSuffix;
  absl::Cleanup remove_temps = [&] {
    unlink(data_temp.c_str());
    unlink(manifest_temp.c_str());
  };
  {
    ASSIGN_OR_RETURN(OutFile data, OutFile::Create(data_temp));
    for (const CheckpointedSession& s : sessions) {
      for (const CheckpointedHandle& h : s.handles) RETURN_IF_ERROR(data.Write(h.bytes));
    }
    RETURN_IF_ERROR(data.Close());
    ASSIGN_OR_RETURN(OutFile out, OutFile::Create(manifest_temp));
    RETURN_IF_ERROR(out.Write(manifest_bytes));
    RETURN_IF_ERROR(out.Close());
  }
  // Manifest last: a reader never pairs the new manifest with old data (the digests would say).
  if (std::rename(data_temp.c_str(), data_path.c_str()) != 0 ||
      std::rename(manifest_temp.c_str(), manifest_path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("checkpoint: rename in ", dir, ": ", ErrnoText(errno)));
  }
  SyncDirectory(dir);
  return stats;
}

namespace {

absl::Status Corrupt(const std::string& path, absl::string_view what) {
  return absl::DataLossError(absl::StrCat("--restore: ", path, ": ", what));
}

// A regular file of ours, opened for reading, and its size.
class InFile {
 public:
  static absl::StatusOr<InFile> Open(const std::string& path) {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
      const int error = errno;
      if (error == ENOENT) {
        return absl::NotFoundError(
            absl::StrCat("--restore: ", path, ": missing (not a complete checkpoint)"));
      }
      return absl::FailedPreconditionError(
          absl::StrCat("--restore: ", path, ": ", ErrnoText(error)));
    }
    InFile file(path, fd);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      return Corrupt(path, "not a regular file");
    }
    file.size_ = static_cast<uint64_t>(st.st_size);
    return file;
  }
  InFile(InFile&& other) noexcept
      : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)), size_(other.size_) {}
  ~InFile() {
    if (fd_ >= 0) close(fd_);
  }
  uint64_t size() const { return size_; }
  // Exactly `n` bytes from `offset`; the caller checked the range against size().
  absl::StatusOr<std::string> Read(uint64_t offset, uint64_t n) const {
    std::string out(n, '\0');
    uint64_t done = 0;
    while (done < n) {
      const ssize_t got =
          pread(fd_, out.data() + done, n - done, static_cast<off_t>(offset + done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return Corrupt(path_, got < 0 ? ErrnoText(errno) : "shorter than its size");
      done += static_cast<uint64_t>(got);
    }
    return out;
  }

 private:
  InFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_;
  uint64_t size_ = 0;
};

absl::StatusOr<PrincipalPtr> FindPrincipal(const AuthPolicy& policy, const std::string& name,
                                           uint64_t session) {
  if (name.empty()) return PrincipalPtr();
  for (const PrincipalPtr& p : policy.principals) {
    if (p->name == name) return p;
  }
  if (policy.anonymous_tcp != nullptr && policy.anonymous_tcp->name == name) {
    return policy.anonymous_tcp;
  }
  return absl::FailedPreconditionError(
      absl::StrCat("--restore: session ", session, " belongs to principal '", name,
                   "', which this daemon's auth policy does not define"));
}

// Checks one session of the manifest and reads its handles' bytes; `offset` is where its first
// handle must start, and moves past its last.
absl::StatusOr<CheckpointedSession> ReadSession(const v1::CheckpointSession& in, const InFile& data,
                                                const std::string& data_path,
                                                const std::string& where, uint64_t& offset,
                                                const AuthPolicy& policy, uint32_t devices,
                                                absl::Duration max_lease) {
  CheckpointedSession s;
  s.id = SessionId(in.id());
  s.device = in.device();
  if ((in.id() >> 8) == 0 || (in.id() & 0xff) != in.device() || in.device() >= devices) {
    return Corrupt(where,
                   absl::StrCat("session id ", in.id(), " on device ", in.device(),
                                " is not a session of this daemon's ", devices, " device(s)"));
  }
  const uint64_t max_ms = static_cast<uint64_t>(absl::ToInt64Milliseconds(max_lease));
  if (in.lease_ms() == 0 || in.lease_ms() > max_ms) {
    return Corrupt(where, absl::StrCat("session ", in.id(), ": lease_ms ", in.lease_ms(),
                                       " is outside 1 .. ", max_ms));
  }
  s.lease = absl::Milliseconds(static_cast<int64_t>(in.lease_ms()));
  s.stream_seq = in.stream_seq();  // Any value: the client's own numbering.
  s.owner_name = in.owner();
  ASSIGN_OR_RETURN(s.owner, FindPrincipal(policy, in.owner(), in.id()));
  absl::flat_hash_set<uint64_t> ids;
  for (const v1::CheckpointHandle& h : in.handles()) {
    const std::string what = absl::StrCat("session ", in.id(), " handle ", h.id(), ": ");
    if (h.id() == 0 || !ids.insert(h.id()).second) {
      return Corrupt(where, absl::StrCat(what, "id 0 or repeated"));
    }
    if (h.size() == 0 || h.refcount() == 0 || h.sha256().size() != kDigestBytes) {
      return Corrupt(where, absl::StrCat(what, "size ", h.size(), ", refcount ", h.refcount(),
                                         ", digest of ", h.sha256().size(), " bytes"));
    }
    const std::optional<uint64_t> end = CheckedAdd(h.data_offset(), h.size());
    if (h.data_offset() != offset || !end || *end > data.size()) {
      return Corrupt(where, absl::StrCat(what, "bytes [", h.data_offset(), ", +", h.size(),
                                         ") are not the next ones of ", data_path, " (at ", offset,
                                         " of ", data.size(), " bytes)"));
    }
    ASSIGN_OR_RETURN(std::string bytes, data.Read(h.data_offset(), h.size()));
    if (Sha256(bytes) != h.sha256()) {
      return Corrupt(data_path, absl::StrCat(what, "bytes [", h.data_offset(), ", +", h.size(),
                                             ") do not match their SHA-256"));
    }
    offset = *end;
    s.handles.push_back(
        CheckpointedHandle{HandleId(h.id()), h.size(), h.refcount(), std::move(bytes)});
  }
  for (const v1::CheckpointPoison& p : in.poisons()) {
    if (p.id() == 0 || p.code() == 0 || p.code() > 16 || p.message().size() > kMaxPoisonMessage) {
      return Corrupt(where, absl::StrCat("session ", in.id(), " poisoned id ", p.id(), ": code ",
                                         p.code(), ", message of ", p.message().size(), " bytes"));
    }
    s.poisons.push_back(CheckpointedPoison{
        HandleId(p.id()), absl::Status(static_cast<absl::StatusCode>(p.code()), p.message())});
  }
  return s;
}

}  // namespace

absl::StatusOr<std::vector<CheckpointedSession>> ReadCheckpoint(const std::string& dir,
                                                                const AuthPolicy& policy,
                                                                uint32_t devices,
                                                                absl::Duration max_lease) {
  const std::string manifest_path = absl::StrCat(dir, "/", kManifestName);
  const std::string data_path = absl::StrCat(dir, "/", kDataName);
  ASSIGN_OR_RETURN(const InFile manifest_file, InFile::Open(manifest_path));
  if (manifest_file.size() > kMaxManifestBytes) {
    return Corrupt(manifest_path,
                   absl::StrCat(manifest_file.size(), " bytes, more than ", kMaxManifestBytes));
  }
  ASSIGN_OR_RETURN(const std::string manifest_bytes, manifest_file.Read(0, manifest_file.size()));
  v1::CheckpointFile file;
  if (!file.ParseFromString(manifest_bytes)) {
    return Corrupt(manifest_path, "not a checkpoint manifest (does not parse)");
  }
  if (file.version() != kFormatVersion) {
    return Corrupt(manifest_path, absl::StrCat("format version ", file.version(),
                                               "; this daemon reads version ", kFormatVersion));
  }
  if (Sha256(file.manifest()) != file.manifest_sha256()) {
    return Corrupt(manifest_path, "the manifest does not match its SHA-256");
  }
  v1::CheckpointManifest manifest;
  if (!manifest.ParseFromString(file.manifest())) {
    return Corrupt(manifest_path, "the manifest does not parse");
  }
  ASSIGN_OR_RETURN(const InFile data, InFile::Open(data_path));
  if (data.size() != manifest.data_size()) {
    return Corrupt(data_path, absl::StrCat(data.size(), " bytes, but the manifest says ",
                                           manifest.data_size(), " (truncated or replaced)"));
  }
  std::vector<CheckpointedSession> sessions;
  absl::flat_hash_set<uint64_t> ids;
  uint64_t offset = 0;
  for (const v1::CheckpointSession& in : manifest.sessions()) {
    if (!ids.insert(in.id()).second) {
      return Corrupt(manifest_path, absl::StrCat("session ", in.id(), " appears twice"));
    }
    ASSIGN_OR_RETURN(CheckpointedSession s, ReadSession(in, data, data_path, manifest_path, offset,
                                                        policy, devices, max_lease));
    sessions.push_back(std::move(s));
  }
  if (offset != data.size()) {
    return Corrupt(data_path,
                   absl::StrCat("the handles cover ", offset, " of its ", data.size(), " bytes"));
  }
  return sessions;
}

}  // namespace cubed
