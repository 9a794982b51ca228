#include "server/daemon/checkpoint_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
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
#include "common/crypto/sha256.h"
#include "common/status_macros.h"
#include "cubed/v1/checkpoint.pb.h"
#include "server/channel/graph.h"
#include "server/daemon/checkpoint_digest.h"
#include "server/daemon/checkpoint_graphs.h"

namespace cubed {
namespace {

constexpr char kManifestName[] = "manifest";
constexpr char kDataName[] = "data";
constexpr char kTempSuffix[] = ".tmp";
// Version 1 had no graphs (Note [Checkpointed graphs], server/channel/graph_checkpoint.h); this
// daemon reads it and writes version 2.
constexpr uint32_t kFormatVersion = 2;
constexpr uint32_t kOldestVersion = 1;
constexpr uint64_t kMaxManifestBytes = uint64_t{256} << 20;
constexpr size_t kDigestBytes = Sha256::kDigestBytes;
constexpr size_t kMaxPoisonMessage = 64 << 10;

// Note [Small writes]: the data file is written at most 256 KiB per write(). ext4 (Linux 6.16
// and later) backs a buffered write with page-cache folios as large as the write; a 16 MiB
// write() or writev() takes 2 MiB folios from high-order free blocks, and on the development VM
// those are the blocks the balloon's free page reporting returned to the host, so copying into
// them faults at the host: 1 GiB took 1.7-2.8 s in 16 MiB writes and 0.28-0.41 s in 64-256 KiB
// ones, every time (docs/benchmarks.md, ninth session). 4096 calls a GiB cost nothing next to it.
constexpr size_t kWriteBytes = size_t{256} << 10;

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
  // Writes the chunks' bytes, in order, at most kWriteBytes per call (Note [Small writes]).
  absl::Status Write(absl::Span<const HostChunk> chunks) {
    for (const HostChunk& c : chunks) {
      for (size_t at = 0; at < c.bytes.size();) {
        const size_t n = std::min<size_t>(c.bytes.size() - at, kWriteBytes);
        RETURN_IF_ERROR(
            Write(absl::string_view(reinterpret_cast<const char*>(c.bytes.data() + at), n)));
        at += n;
      }
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

// The manifest of `sessions`, their handles laid out one after the other in the data file, with
// `digests` (one per handle, in order; null: placeholders of the same size, for sizing).
absl::StatusOr<v1::CheckpointManifest> BuildManifest(
    const std::vector<CheckpointedSession>& sessions, const std::vector<std::string>* digests) {
  v1::CheckpointManifest manifest;
  manifest.set_created_unix_ms(absl::ToUnixMillis(absl::Now()));
  manifest.set_daemon_version(CUBED_VERSION);
  uint64_t offset = 0;
  size_t next = 0;
  for (const CheckpointedSession& s : sessions) {
    v1::CheckpointSession* out = manifest.add_sessions();
    out->set_id(s.id.value());
    out->set_device(s.device);
    out->set_owner(s.owner_name);
    out->set_lease_ms(static_cast<uint64_t>(absl::ToInt64Milliseconds(s.lease)));
    out->set_stream_seq(s.stream_seq);
    // Handles, then orphans, in the order their bytes were written.
    auto add = [&](v1::CheckpointHandle* handle, uint64_t size) -> absl::Status {
      if (digests != nullptr && next >= digests->size()) {
        return absl::InternalError(absl::StrCat("checkpoint: session ", s.id.value(), ": ", next,
                                                " handles were written, not more"));
      }
      handle->set_size(size);
      handle->set_data_offset(offset);
      handle->set_sha256(digests != nullptr ? (*digests)[next++] : std::string(kDigestBytes, '\0'));
      offset += size;  // Bytes held in memory: their sum fits.
      return absl::OkStatus();
    };
    for (const CheckpointedHandle& h : s.handles) {
      v1::CheckpointHandle* handle = out->add_handles();
      handle->set_id(h.id.value());
      handle->set_refcount(h.refcount);
      handle->set_imported(h.imported);
      RETURN_IF_ERROR(add(handle, h.size));
    }
    for (const CheckpointedOrphan& o : s.orphans) RETURN_IF_ERROR(add(out->add_orphans(), o.size));
    for (const CheckpointedGraph& g : s.graphs) GraphToManifest(g, out->add_graphs());
    if (s.recording.has_value()) {
      RecordingToManifest(*s.recording, kMaxPoisonMessage, out->mutable_recording());
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

// RESOURCE_EXHAUSTED when `manifest`'s file would be larger than a restore reads (recorded graphs
// can make it so: up to kMaxGraphBytes of them a session), checked before serializing it.
absl::Status CheckManifestSize(const v1::CheckpointManifest& manifest) {
  constexpr uint64_t kFileOverhead = 64;  // Version, digest and field tags around the manifest.
  const uint64_t size = manifest.ByteSizeLong();
  if (size > kMaxManifestBytes - kFileOverhead) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "checkpoint: the manifest of ", manifest.sessions_size(), " sessions would take ", size,
        " bytes (recorded graphs, mostly), more than the ", kMaxManifestBytes,
        " a restore reads: nothing written; release graphs first"));
  }
  return absl::OkStatus();
}

// The manifest file's bytes for `manifest`; INTERNAL when libcrypto fails.
absl::StatusOr<std::string> ManifestFileBytes(const v1::CheckpointManifest& manifest) {
  v1::CheckpointFile file;
  file.set_version(kFormatVersion);
  file.set_manifest(manifest.SerializeAsString());
  ASSIGN_OR_RETURN(*file.mutable_manifest_sha256(), Sha256::Of(file.manifest()));
  return file.SerializeAsString();
}

}  // namespace

struct CheckpointWriter::State {
  std::string dir;
  std::string data_path;
  std::string data_temp;
  std::string manifest_path;
  std::string manifest_temp;
  std::optional<OutFile> data;
  DigestThread hasher;
  std::vector<std::string> digests;  // One per handle (or orphan) written whole, in order.
  std::vector<uint64_t> written;     // Bytes written of each handle (or orphan) begun.
  bool committed = false;
};

CheckpointWriter::CheckpointWriter(std::unique_ptr<State> state) : state_(std::move(state)) {}

CheckpointWriter::~CheckpointWriter() {
  if (state_->committed) return;
  state_->data.reset();
  unlink(state_->data_temp.c_str());
  unlink(state_->manifest_temp.c_str());
}

absl::StatusOr<std::unique_ptr<CheckpointWriter>> CheckpointWriter::Create(
    const std::string& dir, const std::vector<CheckpointedSession>& tables, uint64_t max_bytes) {
  // Digests have a fixed size: the placeholders' manifest is as large as the final one.
  ASSIGN_OR_RETURN(const v1::CheckpointManifest manifest, BuildManifest(tables, nullptr));
  RETURN_IF_ERROR(CheckManifestSize(manifest));
  uint64_t handles = 0;
  for (const CheckpointedSession& s : tables) handles += s.handles.size() + s.orphans.size();
  ASSIGN_OR_RETURN(const std::string manifest_bytes, ManifestFileBytes(manifest));
  const uint64_t bytes = manifest.data_size() + manifest_bytes.size();
  if (bytes > max_bytes) {  // Both in memory: no overflow.
    return absl::ResourceExhaustedError(absl::StrCat(
        "checkpoint of ", tables.size(), " sessions (", handles, " handles) takes ", bytes,
        " bytes, more than --checkpoint_max_bytes=", max_bytes, ": nothing written"));
  }
  RETURN_IF_ERROR(PrepareDirectory(dir));
  auto state = std::make_unique<State>();
  state->dir = dir;
  state->data_path = absl::StrCat(dir, "/", kDataName);
  state->manifest_path = absl::StrCat(dir, "/", kManifestName);
  state->data_temp = state->data_path + kTempSuffix;
  state->manifest_temp = state->manifest_path + kTempSuffix;
  std::unique_ptr<CheckpointWriter> writer(new CheckpointWriter(std::move(state)));
  ASSIGN_OR_RETURN(OutFile data, OutFile::Create(writer->state_->data_temp));
  writer->state_->data.emplace(std::move(data));
  return writer;
}

absl::Status CheckpointWriter::Write(absl::Span<const HostChunk> chunks) {
  State& st = *state_;
  if (!st.data.has_value()) return absl::InternalError("checkpoint: written after an error");
  for (const HostChunk& c : chunks) {
    if (c.offset == 0) st.written.push_back(0);
    if (st.written.empty() || st.written.back() != c.offset) {
      return absl::InternalError(
          absl::StrCat("checkpoint: a chunk at ", c.offset, " does not continue its handle"));
    }
    st.written.back() += c.bytes.size();
    st.hasher.Add(c.bytes, c.offset == 0, c.last);
  }
  // The digests are computed from the same memory while it is written.
  absl::Status status = st.data->Write(chunks);
  absl::StatusOr<std::vector<std::string>> digests = st.hasher.Wait();
  if (status.ok()) status = digests.status();
  if (!status.ok()) {
    st.data.reset();
    return status;
  }
  for (std::string& d : *digests) st.digests.push_back(std::move(d));
  return absl::OkStatus();
}

absl::StatusOr<CheckpointStats> CheckpointWriter::Commit(
    const std::vector<CheckpointedSession>& sessions) {
  State& st = *state_;
  if (!st.data.has_value()) return absl::InternalError("checkpoint: committed after an error");
  CheckpointStats stats;
  stats.sessions = sessions.size();
  size_t next = 0;
  auto check = [&](uint64_t size, absl::string_view what) -> absl::Status {
    if (next >= st.written.size() || st.written[next] != size) {
      return absl::InternalError(absl::StrCat("checkpoint: ", what, " of ", size,
                                              " bytes was written with ",
                                              next < st.written.size() ? st.written[next] : 0));
    }
    ++next;
    return absl::OkStatus();
  };
  for (const CheckpointedSession& s : sessions) {
    for (const CheckpointedHandle& h : s.handles) {
      RETURN_IF_ERROR(check(h.size, absl::StrCat("handle ", h.id.value())));
    }
    for (size_t i = 0; i < s.orphans.size(); ++i) {
      RETURN_IF_ERROR(check(s.orphans[i].size, absl::StrCat("orphan ", i)));
    }
    stats.handles += s.handles.size();
    stats.graphs += s.graphs.size();
  }
  if (next != st.written.size() || next != st.digests.size()) {
    return absl::InternalError(absl::StrCat("checkpoint: ", st.written.size(),
                                            " handles written and ", st.digests.size(),
                                            " digested for ", next));
  }
  ASSIGN_OR_RETURN(const v1::CheckpointManifest manifest, BuildManifest(sessions, &st.digests));
  RETURN_IF_ERROR(CheckManifestSize(manifest));
  ASSIGN_OR_RETURN(const std::string manifest_bytes, ManifestFileBytes(manifest));
  stats.bytes = manifest.data_size() + manifest_bytes.size();
  absl::Status closed = st.data->Close();
  st.data.reset();
  RETURN_IF_ERROR(closed);
  {
    ASSIGN_OR_RETURN(OutFile out, OutFile::Create(st.manifest_temp));
    RETURN_IF_ERROR(out.Write(absl::string_view(manifest_bytes)));
    RETURN_IF_ERROR(out.Close());
  }
  // Manifest last: a reader never pairs the new manifest with old data (the digests would say).
  if (std::rename(st.data_temp.c_str(), st.data_path.c_str()) != 0 ||
      std::rename(st.manifest_temp.c_str(), st.manifest_path.c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("checkpoint: rename in ", st.dir, ": ", ErrnoText(errno)));
  }
  st.committed = true;
  SyncDirectory(st.dir);
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
  const std::string& path() const { return path_; }
  // Exactly the bytes of `iov` (at most IOV_MAX) from `offset` on; the caller checked the range
  // against size(). Adjusts `iov` on a partial read.
  absl::Status Read(uint64_t offset, std::vector<iovec>& iov) const {
    for (size_t first = 0; first < iov.size();) {
      const ssize_t got = preadv(fd_, iov.data() + first, static_cast<int>(iov.size() - first),
                                 static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return Corrupt(path_, got < 0 ? ErrnoText(errno) : "shorter than its size");
      offset += static_cast<uint64_t>(got);
      size_t done = static_cast<size_t>(got);
      while (first < iov.size() && done >= iov[first].iov_len) done -= iov[first++].iov_len;
      if (first < iov.size()) {
        iov[first].iov_base = static_cast<uint8_t*>(iov[first].iov_base) + done;
        iov[first].iov_len -= done;
      }
    }
    return absl::OkStatus();
  }
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

// Where a handle's bytes are in the data file, and their digest.
struct HandleBytes {
  std::string name;  // "handle ID" or "orphan I", for errors.
  uint64_t offset = 0;
  uint64_t size = 0;
  std::string sha256;
};

// Checks one session of the manifest and appends where its handles' bytes are to `bytes`;
// `offset` is where its first handle must start, and moves past its last.
// Checks where one handle's (or orphan's) bytes lie: the next ones of the data file.
absl::Status CheckBytes(const v1::CheckpointHandle& h, const std::string& what, const InFile& data,
                        const std::string& data_path, const std::string& where, uint64_t& offset,
                        std::vector<HandleBytes>& bytes) {
  if (h.size() == 0 || h.sha256().size() != kDigestBytes) {
    return Corrupt(where, absl::StrCat(what, ": size ", h.size(), ", digest of ", h.sha256().size(),
                                       " bytes"));
  }
  const std::optional<uint64_t> end = CheckedAdd(h.data_offset(), h.size());
  if (h.data_offset() != offset || !end || *end > data.size()) {
    return Corrupt(where, absl::StrCat(what, ": bytes [", h.data_offset(), ", +", h.size(),
                                       ") are not the next ones of ", data_path, " (at ", offset,
                                       " of ", data.size(), " bytes)"));
  }
  offset = *end;
  bytes.push_back(HandleBytes{what, h.data_offset(), h.size(), h.sha256()});
  return absl::OkStatus();
}

// The graphs and recording of one session (Note [Checkpointed graphs]), checked as far as they
// can be without its tables; the Device checks them against the tables on restore.
absl::Status ReadGraphs(const v1::CheckpointSession& in, uint32_t version,
                        const RequestLimits& limits, const std::string& where,
                        CheckpointedSession& s) {
  if (version < 2 && (in.orphans_size() > 0 || in.graphs_size() > 0 || in.has_recording())) {
    return Corrupt(where, absl::StrCat("session ", in.id(),
                                       ": graphs in a version 1 checkpoint, which has none"));
  }
  if (static_cast<size_t>(in.graphs_size()) > kMaxGraphs) {
    return Corrupt(where, absl::StrCat("session ", in.id(), ": ", in.graphs_size(),
                                       " graphs; at most ", kMaxGraphs));
  }
  for (const v1::CheckpointGraph& g : in.graphs()) {
    absl::StatusOr<CheckpointedGraph> graph = GraphFromManifest(g, limits);
    if (!graph.ok()) {
      return Corrupt(where, absl::StrCat("session ", in.id(), " ", graph.status().message()));
    }
    s.graphs.push_back(*std::move(graph));
  }
  if (in.has_recording()) {
    absl::StatusOr<CheckpointedRecording> recording =
        RecordingFromManifest(in.recording(), limits, kMaxPoisonMessage);
    if (!recording.ok()) {
      return Corrupt(where, absl::StrCat("session ", in.id(), " ", recording.status().message()));
    }
    s.recording = *std::move(recording);
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointedSession> ReadSession(const v1::CheckpointSession& in, uint32_t version,
                                                const InFile& data, const std::string& data_path,
                                                const std::string& where, uint64_t& offset,
                                                const AuthPolicy& policy, uint32_t devices,
                                                absl::Duration max_lease,
                                                const RequestLimits& limits,
                                                std::vector<HandleBytes>& bytes) {
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
    const std::string what = absl::StrCat("session ", in.id(), " handle ", h.id());
    if (h.id() == 0 || !ids.insert(h.id()).second || h.refcount() == 0) {
      return Corrupt(where, absl::StrCat(what, ": id 0 or repeated, or refcount 0"));
    }
    RETURN_IF_ERROR(CheckBytes(h, absl::StrCat("handle ", h.id()), data, data_path,
                               absl::StrCat(where, ": session ", in.id()), offset, bytes));
    s.handles.push_back(CheckpointedHandle{HandleId(h.id()), h.size(), h.refcount(), h.imported()});
  }
  for (int i = 0; i < in.orphans_size(); ++i) {
    const v1::CheckpointHandle& o = in.orphans(i);
    if (o.id() != 0 || o.refcount() != 0 || o.imported()) {
      return Corrupt(where, absl::StrCat("session ", in.id(), " orphan ", i,
                                         ": has an id, a refcount or an import"));
    }
    RETURN_IF_ERROR(CheckBytes(o, absl::StrCat("orphan ", i), data, data_path,
                               absl::StrCat(where, ": session ", in.id()), offset, bytes));
    s.orphans.push_back(CheckpointedOrphan{o.size(), 0});
  }
  RETURN_IF_ERROR(ReadGraphs(in, version, limits, where, s));
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

// Reads into the chunks of one session's handles as a restore hands them out, in order, and
// checks each handle's digest: preadv()s of up to kReadPieceBytes, each hashed on the digest
// thread while the next is read (Note [Checkpoint I/O], server/channel/device.h).
class FileSource final : public CheckpointSource {
 public:
  FileSource(const InFile& data, uint64_t session, const std::vector<HandleBytes>& handles)
      : data_(data), session_(session), handles_(handles) {}

  absl::Status Fill(absl::Span<const HostChunk> chunks) override {
    absl::Status status = Read(chunks);
    // The digest thread may still be reading pieces queued before an error: the caller frees
    // their memory once this returns.
    absl::StatusOr<std::vector<std::string>> digests = hasher_.Wait();
    if (status.ok()) status = digests.status();
    if (!status.ok()) return status;
    for (const std::string& digest : *digests) {
      const HandleBytes& h = handles_[verified_++];
      if (digest != h.sha256) {
        return Corrupt(data_.path(),
                       absl::StrCat("session ", session_, " ", h.name, ": bytes [", h.offset, ", +",
                                    h.size, ") do not match their SHA-256"));
      }
    }
    return absl::OkStatus();
  }

  absl::Status Finish() override {
    if (next_ != handles_.size() || verified_ != handles_.size()) {
      return absl::InternalError(absl::StrCat("restore of session ", session_, ": ", verified_,
                                              " of its ", handles_.size(), " handles filled"));
    }
    return absl::OkStatus();
  }

 private:
  static constexpr uint64_t kReadPieceBytes = uint64_t{1} << 20;

  // Reads the chunks' bytes and queues them on the digest thread, piece by piece.
  absl::Status Read(absl::Span<const HostChunk> chunks) {
    std::vector<iovec> iov;
    uint64_t start = 0;  // File offset of iov's first byte.
    uint64_t end = 0;    // ... and past its last.
    size_t first = 0;    // chunks[first] is iov[0].
    auto read = [&](size_t upto) -> absl::Status {
      if (iov.empty()) return absl::OkStatus();
      RETURN_IF_ERROR(data_.Read(start, iov));
      for (size_t k = first; k < upto; ++k) {
        const HostChunk& c = chunks[k];
        hasher_.Add(c.bytes, c.offset == 0, c.offset + c.bytes.size() == handles_[c.index].size);
      }
      iov.clear();
      first = upto;
      return absl::OkStatus();
    };
    for (size_t k = 0; k < chunks.size(); ++k) {
      const HostChunk& c = chunks[k];
      RETURN_IF_ERROR(Follows(c));
      const uint64_t at = handles_[c.index].offset + c.offset;  // Inside the file: checked.
      if (!iov.empty() && (at != end || iov.size() == IOV_MAX || end - start >= kReadPieceBytes)) {
        RETURN_IF_ERROR(read(k));
      }
      if (iov.empty()) start = end = at;
      iov.push_back(iovec{c.bytes.data(), c.bytes.size()});
      end += c.bytes.size();
    }
    return read(chunks.size());
  }

  // Whether `c` is the next piece of the session's bytes (the backend hands them out in order).
  absl::Status Follows(const HostChunk& c) {
    const std::optional<uint64_t> end = CheckedAdd(c.offset, c.bytes.size());
    if (next_ >= handles_.size() || c.index != next_ || c.offset != next_offset_ ||
        c.bytes.empty() || !end || *end > handles_[next_].size) {
      return absl::InternalError(absl::StrCat("restore of session ", session_,
                                              ": chunk of handle #", c.index, " at ", c.offset,
                                              " out of order"));
    }
    next_offset_ = *end;
    if (next_offset_ == handles_[next_].size) {
      ++next_;
      next_offset_ = 0;
    }
    return absl::OkStatus();
  }

  const InFile& data_;
  const uint64_t session_;
  const std::vector<HandleBytes>& handles_;
  DigestThread hasher_;
  size_t next_ = 0;           // The handle the next chunk belongs to.
  uint64_t next_offset_ = 0;  // ... and its offset there.
  size_t verified_ = 0;       // Handles whose digest matched.
};

}  // namespace

struct CheckpointReader::State {
  std::optional<InFile> data;
  std::vector<CheckpointedSession> sessions;
  std::vector<uint64_t> ids;                    // sessions[i]'s id (they may be moved out).
  std::vector<std::vector<HandleBytes>> bytes;  // sessions[i]'s handles.
};

CheckpointReader::CheckpointReader(std::unique_ptr<State> state) : state_(std::move(state)) {}
CheckpointReader::~CheckpointReader() = default;

std::vector<CheckpointedSession>& CheckpointReader::sessions() { return state_->sessions; }

std::unique_ptr<CheckpointSource> CheckpointReader::Source(size_t i) {
  return std::make_unique<FileSource>(*state_->data, state_->ids[i], state_->bytes[i]);
}

absl::StatusOr<std::unique_ptr<CheckpointReader>> CheckpointReader::Open(
    const std::string& dir, const AuthPolicy& policy, uint32_t devices, absl::Duration max_lease,
    const RequestLimits& limits) {
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
  if (file.version() < kOldestVersion || file.version() > kFormatVersion) {
    return Corrupt(manifest_path,
                   absl::StrCat("format version ", file.version(), "; this daemon reads versions ",
                                kOldestVersion, " .. ", kFormatVersion));
  }
  ASSIGN_OR_RETURN(const std::string digest, Sha256::Of(file.manifest()));
  if (digest != file.manifest_sha256()) {
    return Corrupt(manifest_path, "the manifest does not match its SHA-256");
  }
  v1::CheckpointManifest manifest;
  if (!manifest.ParseFromString(file.manifest())) {
    return Corrupt(manifest_path, "the manifest does not parse");
  }
  auto state = std::make_unique<State>();
  ASSIGN_OR_RETURN(InFile data_file, InFile::Open(data_path));
  const InFile& data = state->data.emplace(std::move(data_file));
  if (data.size() != manifest.data_size()) {
    return Corrupt(data_path, absl::StrCat(data.size(), " bytes, but the manifest says ",
                                           manifest.data_size(), " (truncated or replaced)"));
  }
  absl::flat_hash_set<uint64_t> ids;
  uint64_t offset = 0;
  for (const v1::CheckpointSession& in : manifest.sessions()) {
    if (!ids.insert(in.id()).second) {
      return Corrupt(manifest_path, absl::StrCat("session ", in.id(), " appears twice"));
    }
    std::vector<HandleBytes> bytes;
    ASSIGN_OR_RETURN(CheckpointedSession s,
                     ReadSession(in, file.version(), data, data_path, manifest_path, offset, policy,
                                 devices, max_lease, limits, bytes));
    state->sessions.push_back(std::move(s));
    state->ids.push_back(in.id());
    state->bytes.push_back(std::move(bytes));
  }
  if (offset != data.size()) {
    return Corrupt(data_path,
                   absl::StrCat("the handles cover ", offset, " of its ", data.size(), " bytes"));
  }
  return std::unique_ptr<CheckpointReader>(new CheckpointReader(std::move(state)));
}

}  // namespace cubed
