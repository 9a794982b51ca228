#include "tests/bench/cpu/baseline_child.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "echo.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace cubed::cpubench {
namespace {

class EchoService final : public cubed_bench::Echo::CallbackService {
 public:
  grpc::ServerUnaryReactor* Echo(grpc::CallbackServerContext* ctx,
                                 const cubed_bench::EchoMessage* req,
                                 cubed_bench::EchoMessage* resp) override {
    resp->set_data(req->data());
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* EchoViaThread(grpc::CallbackServerContext* ctx,
                                          const cubed_bench::EchoMessage* req,
                                          cubed_bench::EchoMessage* resp) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    Post([req, resp, reactor] {
      resp->set_data(req->data());
      reactor->Finish(grpc::Status::OK);
    });
    return reactor;
  }

 private:
  void Post(std::function<void()> work) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(work));
    }
    cv_.notify_one();
  }
  void Loop() {
    for (;;) {
      std::function<void()> work;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return !queue_.empty(); });
        work = std::move(queue_.front());
        queue_.pop_front();
      }
      work();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::thread worker_{[this] { Loop(); }};  // Never joined: the child _exits.
};

bool ReadFull(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t got = read(fd, p, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

bool WriteFull(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t put = write(fd, p, n);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    p += put;
    n -= static_cast<size_t>(put);
  }
  return true;
}

// One raw connection: length-prefixed buffer in, the same bytes out, until EOF. The buffer is
// reused (and thereby warm) across requests, like the daemon's pool.
void ServeRaw(int fd) {
  std::string buffer;
  uint64_t n = 0;
  while (ReadFull(fd, reinterpret_cast<char*>(&n), sizeof(n))) {
    if (buffer.size() < n) buffer.resize(n, '\x5a');
    if (!ReadFull(fd, buffer.data(), n) || !WriteFull(fd, buffer.data(), n)) break;
  }
  close(fd);
}

[[noreturn]] void ChildMain(const std::string& dir, int ready_fd, int control_fd) {
  signal(SIGPIPE, SIG_IGN);
  const std::string raw_path = dir + "/raw.sock";
  int listener = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, raw_path.c_str(), sizeof(addr.sun_path) - 1);
  if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listener, 8) != 0) {
    _exit(3);
  }
  // The same raw server on TCP 127.0.0.1 (an ephemeral port).
  int tcp_listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in tcp_addr{};
  tcp_addr.sin_family = AF_INET;
  tcp_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t tcp_len = sizeof(tcp_addr);
  if (tcp_listener < 0 ||
      bind(tcp_listener, reinterpret_cast<sockaddr*>(&tcp_addr), sizeof(tcp_addr)) != 0 ||
      listen(tcp_listener, 8) != 0 ||
      getsockname(tcp_listener, reinterpret_cast<sockaddr*>(&tcp_addr), &tcp_len) != 0) {
    _exit(3);
  }
  for (int l : {listener, tcp_listener}) {
    std::thread([l] {
      for (;;) {
        int fd = accept(l, nullptr, nullptr);
        if (fd < 0) {
          if (errno == EINTR) continue;
          return;
        }
        std::thread(ServeRaw, fd).detach();
      }
    }).detach();
  }

  auto* service = new EchoService();  // Leaked: its worker never ends; the child _exits.
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(512 << 20);  // As the daemon's default --max_message_bytes.
  builder.SetMaxSendMessageSize(512 << 20);
  int tcp_port = 0;
  builder.AddListeningPort("unix:" + dir + "/echo.sock", grpc::InsecureServerCredentials());
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &tcp_port);
  builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || tcp_port == 0) _exit(4);
  std::string port = absl::StrCat(tcp_port, " ", ntohs(tcp_addr.sin_port), "\n");
  if (!WriteFull(ready_fd, port.data(), port.size())) _exit(5);
  close(ready_fd);

  for (;;) {  // Until the parent closes the control pipe (or dies).
    char byte;
    ssize_t got = read(control_fd, &byte, 1);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
  }
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  _exit(0);
}

}  // namespace

absl::StatusOr<std::unique_ptr<BaselineChild>> BaselineChild::Start(const std::string& dir) {
  int ready[2], control[2];
  if (pipe(ready) != 0 || pipe(control) != 0) return absl::InternalError("pipe failed");
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork failed: errno ", errno));
  if (pid == 0) {
    close(ready[0]);
    close(control[1]);
    ChildMain(dir, ready[1], control[0]);
  }
  close(ready[1]);
  close(control[0]);
  std::unique_ptr<BaselineChild> c(new BaselineChild());
  c->pid_ = pid;
  c->control_fd_ = control[1];
  c->raw_path_ = dir + "/raw.sock";
  c->echo_unix_ = "unix:" + dir + "/echo.sock";

  pollfd p{ready[0], POLLIN, 0};
  std::string text;
  char buf[32];
  while (text.find('\n') == std::string::npos) {
    if (poll(&p, 1, 20000) <= 0) break;
    ssize_t got = read(ready[0], buf, sizeof(buf));
    if (got <= 0) break;
    text.append(buf, static_cast<size_t>(got));
  }
  close(ready[0]);
  int port = 0;
  const std::string line = text.substr(0, text.find('\n'));
  const size_t space = line.find(' ');
  if (space == std::string::npos || !absl::SimpleAtoi(line.substr(0, space), &port) ||
      !absl::SimpleAtoi(line.substr(space + 1), &c->raw_tcp_port_)) {
    return absl::FailedPreconditionError("the baseline child did not start its servers");
  }
  c->echo_tcp_ = absl::StrCat("127.0.0.1:", port);
  return c;
}

BaselineChild::~BaselineChild() {
  if (control_fd_ >= 0) close(control_fd_);
  if (pid_ <= 0) return;
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (absl::Now() < deadline) {
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
    absl::SleepFor(absl::Milliseconds(10));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
}

absl::StatusOr<int> ConnectUnix(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (fd >= 0) close(fd);
    return absl::UnavailableError(absl::StrCat("cannot connect to ", path, ": errno ", errno));
  }
  return fd;
}

absl::StatusOr<int> ConnectTcp(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (fd >= 0) close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot connect to 127.0.0.1:", port, ": errno ", errno));
  }
  return fd;
}

absl::Status RawRoundTrip(int fd, const std::string& data, std::string* back) {
  uint64_t n = data.size();
  back->resize(data.size());
  if (!WriteFull(fd, reinterpret_cast<const char*>(&n), sizeof(n)) ||
      !WriteFull(fd, data.data(), data.size()) || !ReadFull(fd, back->data(), back->size())) {
    return absl::UnavailableError(absl::StrCat("raw round trip failed: errno ", errno));
  }
  return absl::OkStatus();
}

}  // namespace cubed::cpubench
