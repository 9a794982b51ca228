#include "server/daemon.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "server/backend_registry.h"
#include "server/compute_service.h"
#include "server/device_loop.h"
#include "server/health_service.h"
#include "server/session_stream.h"
#include "spdlog/spdlog.h"
#ifdef CUBED_WITH_CUDA
#include "server/cuda/cuda_server.h"
#endif

namespace cubed {
namespace {

#ifdef CUBED_WITH_CUDA
// Exit status after a device was lost (docs/error-model.md rule 5): non-zero, so that systemd's
// Restart=on-failure starts a fresh daemon with a fresh CUDA context.
constexpr int kDeviceLostExitCode = 3;
// Between NOT_SERVING and the exit, so that calls in flight get their UNAVAILABLE answers and
// health checks can see NOT_SERVING.
constexpr absl::Duration kDeviceLostGrace = absl::Seconds(1);
#endif

// Makes the socket's directory (0700 when we create it) and removes a stale socket file. A live
// daemon on the same path is an error rather than something to steal from.
absl::Status PrepareUnixSocket(const std::string& path) {
  if (path.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("--listen: socket path '", path, "' is longer than ",
                                                   sizeof(sockaddr_un{}.sun_path) - 1, " bytes"));
  }
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty() && !std::filesystem::exists(dir, ec)) {
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      return absl::FailedPreconditionError(
          absl::StrCat("--listen: cannot create directory ", dir.string(), ": ", ec.message()));
    }
    chmod(dir.c_str(), 0700);
  }
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return absl::OkStatus();
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("--listen: ", path, " exists and is not a socket"));
  }
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  const bool live = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  if (live) {
    return absl::FailedPreconditionError(
        absl::StrCat("--listen: another process already serves on ", path));
  }
  unlink(path.c_str());
  return absl::OkStatus();
}

absl::Status WriteReadyFile(const std::string& path, const DaemonConfig& config, int tcp_port) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    if (!config.unix_socket.empty()) out << "unix=unix:" << config.unix_socket << "\n";
    if (!config.tcp_address.empty()) {
      const std::string host = config.tcp_address.substr(0, config.tcp_address.rfind(':'));
      out << "tcp=" << host << ":" << tcp_port << "\n";
    }
    if (!out) return absl::FailedPreconditionError(absl::StrCat("--ready_file: cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("--ready_file: cannot rename to ", path));
  }
  return absl::OkStatus();
}

#ifdef CUBED_WITH_CUDA
// Note [Device lost] (server/cuda/cuda_server.h): health NOT_SERVING, then exit non-zero after
// a grace period. No orderly Shutdown: the device's context is unusable, and Shutdown must not
// run on the loop or completion thread that calls this.
void ExitAfterDeviceLost(HealthService* health, const std::string& unix_socket,
                         const absl::Status& status) {
  spdlog::critical("device lost ({}): health NOT_SERVING; exiting with status {} in {}",
                   std::string(status.message()), kDeviceLostExitCode, absl::FormatDuration(kDeviceLostGrace));
  if (health != nullptr) health->SetServing(false);
  std::thread([unix_socket] {
    absl::SleepFor(kDeviceLostGrace);
    if (!unix_socket.empty()) unlink(unix_socket.c_str());
    spdlog::default_logger()->flush();
    _exit(kDeviceLostExitCode);
  }).detach();
}
#endif

}  // namespace

void Daemon::BlockTerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int Daemon::WaitForTerminationSignal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  int signal = 0;
  while (sigwait(&set, &signal) != 0) {
  }
  return signal;
}

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(const DaemonConfig& config) {
  std::unique_ptr<Daemon> d(new Daemon());
  d->config_ = config;

  ASSIGN_OR_RETURN(std::unique_ptr<ComputeServer> backend, CreateBackend(config));
#ifdef CUBED_WITH_CUDA
  if (auto* cuda = dynamic_cast<CudaServer*>(backend.get())) {
    Daemon* self = d.get();
    cuda->SetDeviceLostCallback([self](const absl::Status& status) {
      ExitAfterDeviceLost(self->health_.get(), self->config_.unix_socket, status);
    });
  }
#endif
  const DeviceDescription& desc = backend->Description();
  spdlog::info("device {}: {} ({} MiB limit, alignment {})", desc.index, desc.name,
               desc.memory_limit >> 20, desc.alignment);
  DeviceOptions device_options;
  device_options.default_lease = config.session_lease;
  device_options.allow_unchecked = config.allow_unchecked;
  // A read's payload plus framing must fit in one message.
  device_options.max_read_bytes = static_cast<uint64_t>(config.max_message_bytes) - 4096;
  d->loops_.push_back(std::make_unique<DeviceLoop>(
      std::make_unique<Device>(0, std::move(backend), device_options)));

  std::vector<DeviceLoop*> loops;
  for (auto& loop : d->loops_) loops.push_back(loop.get());
  d->compute_ = std::make_unique<ComputeService>(loops, RequestLimits{});
  d->health_ = std::make_unique<HealthService>();

  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(config.max_message_bytes);
  builder.SetMaxSendMessageSize(config.max_message_bytes);
  builder.RegisterService(d->compute_.get());
  builder.RegisterService(d->health_.get());
  d->streams_ = std::make_unique<SessionStreamService>(loops, RequestLimits{});
  builder.RegisterService(d->streams_.get());
  if (!config.unix_socket.empty()) {
    RETURN_IF_ERROR(PrepareUnixSocket(config.unix_socket));
    builder.AddListeningPort("unix:" + config.unix_socket, grpc::InsecureServerCredentials());
  }
  int tcp_port = 0;
  if (!config.tcp_address.empty()) {
    spdlog::warn("serving plain TCP on {}: no authentication or encryption yet",
                 config.tcp_address);
    builder.AddListeningPort(config.tcp_address, grpc::InsecureServerCredentials(), &tcp_port);
  }
  d->server_ = builder.BuildAndStart();
  if (d->server_ == nullptr || (!config.tcp_address.empty() && tcp_port == 0)) {
    return absl::UnavailableError(absl::StrCat(
        "could not start serving on ",
        config.unix_socket.empty() ? "" : "unix:" + config.unix_socket, " ", config.tcp_address,
        " (address in use, or a bad host:port?)"));
  }
  if (!config.unix_socket.empty()) {
    chmod(config.unix_socket.c_str(), 0660);
    spdlog::info("serving on unix:{}", config.unix_socket);
  }
  if (tcp_port != 0) spdlog::info("serving on tcp port {}", tcp_port);
  d->health_->SetServing(true);
  if (!config.ready_file.empty()) RETURN_IF_ERROR(WriteReadyFile(config.ready_file, config, tcp_port));
  return d;
}

void Daemon::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  spdlog::info("shutting down: no new calls; waiting for calls in flight");
  compute_->StartDraining();
  streams_->StartDraining();
  health_->SetServing(false);
  health_->Shutdown();
  // Calls already inside gRPC's pipeline reach the service during this grace period and are
  // answered UNAVAILABLE, instead of being cancelled by the server's shutdown below. Then let
  // the loops finish what was posted before the drain began (bounded).
  absl::SleepFor(absl::Milliseconds(100));
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  for (auto& loop : loops_) {
    while (loop->queued() > 0 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
  }
  // The loops keep running while the server drains, so queued calls can finish.
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server_->Wait();
  for (auto& loop : loops_) loop->Stop();  // Closes every session, frees every page.
  loops_.clear();
  if (!config_.unix_socket.empty()) unlink(config_.unix_socket.c_str());
  spdlog::info("shut down cleanly");
}

Daemon::~Daemon() {
  if (server_ != nullptr) Shutdown();
  server_.reset();  // Before the services registered with it.
}

}  // namespace cubed
