#include "client/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "cubed/v1/region.pb.h"

namespace cubed {
namespace {

absl::Status Errno(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<SharedMemory> SharedMemory::Create(uint64_t size) {
  if (size == 0 || size > uint64_t{1} << 62) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory: size ", size, "; expected 1 .. 2^62 bytes"));
  }
  const int fd = memfd_create("cubed-region", MFD_CLOEXEC | MFD_ALLOW_SEALING);
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
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (region_socket.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("region socket path '", region_socket, "' is too long"));
  }
  std::strncpy(addr.sun_path, region_socket.c_str(), sizeof(addr.sun_path) - 1);
  const int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (sock < 0) return Errno("socket");
  absl::Cleanup close_sock = [sock] { close(sock); };
  if (connect(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return absl::UnavailableError(
        absl::StrCat("region socket ", region_socket, ": ", std::strerror(errno)));
  }
  v1::RegisterRegionRequest request;
  request.set_session(session);
  std::string bytes = request.SerializeAsString();  // Not empty: session != 0.
  iovec iov{bytes.data(), bytes.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(int));
  const int fd = memory.fd();
  std::memcpy(CMSG_DATA(cmsg), &fd, sizeof(int));
  if (sendmsg(sock, &msg, MSG_NOSIGNAL) < 0) return Errno("region socket: sendmsg");
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
