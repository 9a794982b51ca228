// File-descriptor exhaustion (issue 15's drill, Note [Descriptor exhaustion]): a daemon whose
// descriptors are used up by idle connections refuses new ones at once (they see their end) and
// keeps serving the sessions it has; once the idle ones close, new clients connect again.

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "tests/integration/integration_test.h"

namespace cubed::integration {
namespace {

// A raw connection to the daemon's Unix socket that sends nothing; -1 on failure (a full backlog
// included: the socket does not block in connect).
int ConnectRaw(const std::string& address) {
  std::string path = address;
  if (absl::StartsWith(path, "unix:")) path = path.substr(5);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// True when the daemon ended the connection within `timeout` (EOF or hang-up).
bool EndedWithin(int fd, absl::Duration timeout) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) <= 0) return false;
  char byte;
  return (p.revents & (POLLHUP | POLLERR)) != 0 || recv(fd, &byte, 1, MSG_DONTWAIT) == 0;
}

absl::Status CreateAndRead(Client& client, const std::string& bytes) {
  auto h = client.Create(std::vector<uint8_t>(bytes.begin(), bytes.end()));
  if (!h.ok()) return h.status();
  auto read = client.Read({*h}).get();
  if (!read.ok()) return read.status();
  if (read->size() != 1 || (*read)[0] != bytes) return absl::DataLossError("wrong bytes");
  return absl::OkStatus();
}

TEST(DescriptorLimitTest, NewConnectionsAreRefusedAndOpenSessionsKeepWorking) {
  testing::DaemonProcess::Options options;
  options.open_files_limit = 96;
  auto daemon = testing::DaemonProcess::Start(options);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  ClientOptions client_options;
  client_options.address = (*daemon)->unix_address();
  client_options.timeout = absl::Seconds(30);
  auto working = Client::Connect(client_options);
  ASSERT_TRUE(working.ok()) << working.status();
  ASSERT_TRUE(CreateAndRead(**working, "before").ok());

  // Idle connections until one is refused: the daemon is then out of descriptors.
  std::vector<int> idle;
  bool refused = false;
  for (int i = 0; i < 400 && !refused; ++i) {
    const int fd = ConnectRaw((*daemon)->unix_address());
    if (fd < 0) break;  // The backlog is full: connect itself refused.
    idle.push_back(fd);
    refused = EndedWithin(fd, absl::Milliseconds(i < 40 ? 20 : 300));
  }
  EXPECT_TRUE(refused) << idle.size() << " idle connections, none refused\n"
                       << (*daemon)->LogTail();
  bool warned = false;  // The daemon's log is written by its logger thread: wait for it.
  for (int i = 0; i < 100 && !warned; ++i) {
    warned = absl::StrContains((*daemon)->Log(), "out of file descriptors");
    if (!warned) absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(warned) << (*daemon)->LogTail();

  // The open session keeps being served.
  EXPECT_TRUE(CreateAndRead(**working, "during").ok());

  // Once the idle connections go, new clients get in again.
  for (int fd : idle) close(fd);
  absl::Status joined = absl::UnavailableError("not tried");
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (absl::Now() < deadline) {
    client_options.timeout = absl::Seconds(5);
    auto fresh = Client::Connect(client_options);
    joined = fresh.ok() ? CreateAndRead(**fresh, "after") : fresh.status();
    if (joined.ok()) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_TRUE(joined.ok()) << joined << "\n" << (*daemon)->LogTail();
  EXPECT_TRUE(CreateAndRead(**working, "still").ok());
}

}  // namespace
}  // namespace cubed::integration
