#include "server/channel/shared_region.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"

namespace cubed {
namespace {

absl::Status Refused(absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("region: the descriptor ", why));
}

}  // namespace

absl::StatusOr<std::unique_ptr<SharedRegion>> SharedRegion::Map(int fd, uint64_t max_bytes) {
  absl::Cleanup close_fd = [fd] { close(fd); };
  // Seals first: once F_SEAL_SHRINK is seen it can never be removed, so the size read after it
  // can only grow (Note [Shared-memory regions]).
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0) {
    if (errno == EBADF) return Refused("is not an open file descriptor");
    return Refused(
        "is not sealable memory: create it with memfd_create(..., MFD_ALLOW_SEALING) and seal it "
        "with F_SEAL_SHRINK");
  }
  if ((seals & F_SEAL_SHRINK) == 0) {
    return Refused("is not sealed against shrinking: add F_SEAL_SHRINK (fcntl F_ADD_SEALS)");
  }
  if ((seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)) != 0) {
    return Refused("is sealed against writes: reads could not land in it");
  }
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || (flags & O_ACCMODE) != O_RDWR) {
    return Refused("is not open for reading and writing");
  }
  struct statfs fs;
  if (fstatfs(fd, &fs) != 0) return Refused(absl::StrCat("cannot be examined: ", strerror(errno)));
  if (static_cast<uint64_t>(fs.f_type) == HUGETLBFS_MAGIC) {
    return Refused(
        "is hugetlbfs memory, which is not supported (a fault without a free huge page "
        "would raise SIGBUS)");
  }
  struct stat st;
  if (fstat(fd, &st) != 0) return Refused(absl::StrCat("cannot be examined: ", strerror(errno)));
  if (!S_ISREG(st.st_mode)) return Refused("is not memory (not a regular file)");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size == 0) return Refused("has size 0: size it (ftruncate) before sealing");
  if (size > max_bytes) {
    return Refused(absl::StrCat("has ", size, " bytes, over this daemon's limit of ", max_bytes,
                                " (--max_region_bytes)"));
  }
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    return absl::InternalError(
        absl::StrCat("region: mmap of ", size, " bytes failed: ", strerror(errno)));
  }
  return std::unique_ptr<SharedRegion>(new SharedRegion(static_cast<uint8_t*>(base), size));
}

SharedRegion::~SharedRegion() { munmap(base_, size_); }

absl::StatusOr<absl::Span<uint8_t>> SharedRegion::Slice(uint64_t offset, uint64_t size,
                                                        absl::string_view field) const {
  if (size == 0) return absl::InvalidArgumentError(absl::StrCat(field, ": size 0"));
  if (offset > size_ || size > size_ - offset) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": bytes [", offset, ", +", size,
                                                   ") exceed the region's ", size_, " bytes"));
  }
  return absl::MakeSpan(base_ + offset, size);
}

}  // namespace cubed
