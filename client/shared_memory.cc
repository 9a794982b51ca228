#include "client/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/fd_passing.h"
#include "common/status_macros.h"
#include "cubed/v1/region.pb.h"

namespace cubed {
namespace {

absl::Status Errno(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<SharedMemory> SharedMemory::Create(uint64_t size, const char* name) {
  if (size == 0 || size > uint64_t{1} << 62) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory: size ", size, "; expected 1 .. 2^62 bytes"));
  }
  const int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Errno("memfd_create");
  absl::Cleanup close_fd = [fd] { close(fd); };
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) return Errno("ftruncate");
  // The daemon refuses memory that could shrink under its mapping (SIGBUS).
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0) return Errno("fcntl F_ADD_SEALS");
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return Errno("mmap");
  std::move(close_fd).Cancel();
  return SharedMemory(fd, static_cast<uint8_t*>(base), size);
}

SharedMemory::SharedMemory(SharedMemory&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      base_(std::exchange(other.base_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

SharedMemory& SharedMemory::operator=(SharedMemory&& other) noexcept {
  if (this != &other) {
    Reset();
    fd_ = std::exchange(other.fd_, -1);
    base_ = std::exchange(other.base_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

SharedMemory::~SharedMemory() { Reset(); }

void SharedMemory::Reset() {
  if (base_ != nullptr) munmap(base_, size_);
  if (fd_ >= 0) close(fd_);
  base_ = nullptr;
  fd_ = -1;
  size_ = 0;
}

absl::StatusOr<uint64_t> RegisterSharedMemory(const std::string& region_socket, uint64_t session,
                                              const SharedMemory& memory) {
  if (session == 0) return absl::InvalidArgumentError("region: no session (0)");
  absl::StatusOr<int> connected = ConnectSeqpacket(region_socket, "region socket");
  if (!connected.ok()) return connected.status();
  const int sock = *connected;
  absl::Cleanup close_sock = [sock] { close(sock); };
  v1::RegisterRegionRequest request;
  request.set_session(session);
  const int fd = memory.fd();
  // Not empty (session != 0), so the message is not mistaken for a close.
  RETURN_IF_ERROR(SendWithDescriptors(sock, request.SerializeAsString(),
                                      absl::MakeConstSpan(&fd, 1), "region socket"));
  char reply[2048];
  const ssize_t n = recv(sock, reply, sizeof(reply), 0);
  if (n <= 0) {
    return absl::UnavailableError(
        absl::StrCat("region socket ", region_socket, ": the daemon closed the connection"));
  }
  v1::RegisterRegionResponse response;
  if (!response.ParseFromArray(reply, static_cast<int>(n))) {
    return absl::InternalError("region socket: the daemon's answer does not parse");
  }
  if (response.code() != 0) {
    return absl::Status(static_cast<absl::StatusCode>(response.code()), response.message());
  }
  return response.region();
}

}  // namespace cubed
