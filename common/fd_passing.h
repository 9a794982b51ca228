#pragma once

// Messages with file descriptors attached (SCM_RIGHTS) on SOCK_SEQPACKET Unix sockets: how the
// region socket and the ring socket pass memfds and eventfds between a client and the daemon.

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace cubed {

// Connects a close-on-exec SOCK_SEQPACKET socket to `path`; the caller owns it. INVALID_ARGUMENT
// for a path too long for sun_path; UNAVAILABLE naming `what` and errno's text otherwise.
absl::StatusOr<int> ConnectSeqpacket(const std::string& path, absl::string_view what);

// Sends `bytes` as one message with `fds` attached (they stay the caller's). The system's error
// naming `what` when sendmsg fails.
absl::Status SendWithDescriptors(int sock, absl::string_view bytes, absl::Span<const int> fds,
                                 absl::string_view what);

// One message received with the descriptors attached to it, which it owns (closed when it is
// destroyed, unless taken with Take).
class ReceivedMessage {
 public:
  ReceivedMessage() = default;
  ReceivedMessage(ReceivedMessage&& other) noexcept;
  ReceivedMessage& operator=(ReceivedMessage&&) = delete;
  ~ReceivedMessage();

  std::string bytes;
  bool truncated = false;      // The message was longer than the buffer (MSG_TRUNC).
  bool fds_truncated = false;  // More descriptors came than were accepted (MSG_CTRUNC).
  bool closed = false;         // The peer closed the connection (nothing received).
  bool again = false;          // Nothing to receive yet (EAGAIN, EINTR): try again later.
  const std::vector<int>& fds() const { return fds_; }
  // Gives descriptor `i` to the caller (it is no longer closed here).
  int Take(size_t i);

 private:
  friend absl::StatusOr<ReceivedMessage> ReceiveWithDescriptors(int, size_t, size_t, int);
  std::vector<int> fds_;
};

// Receives one message of at most `max_bytes` with at most `max_fds` descriptors (received
// close-on-exec) and `flags` for recvmsg (MSG_DONTWAIT, say). A message with `again` set when
// there is nothing yet; UNAVAILABLE with errno's text when recvmsg fails otherwise.
absl::StatusOr<ReceivedMessage> ReceiveWithDescriptors(int sock, size_t max_bytes, size_t max_fds,
                                                       int flags);

}  // namespace cubed
