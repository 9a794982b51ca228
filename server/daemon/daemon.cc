#include "server/daemon/daemon.h"

#include <grpc/grpc.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "server/channel/device_loop.h"
#include "server/compute/backend_registry.h"
#include "server/daemon/auth_config.h"
#include "server/daemon/liveness_monitor.h"
#include "server/daemon/systemd_notify.h"
#include "server/metrics/metrics.h"
#include "server/metrics/metrics_http.h"
#include "server/metrics/metrics_text.h"
#include "server/metrics/stats_collector.h"
#include "server/service/authenticator.h"
#include "server/service/call_counter.h"
#include "server/service/compute_service.h"
#include "server/service/health_service.h"
#include "server/service/region_listener.h"
#include "server/service/request_log.h"
#include "server/service/ring/ring_listener.h"
#include "server/service/stream/session_stream.h"
#include "server/service/unix_listener.h"
#include "spdlog/spdlog.h"

namespace cubed {
namespace {

// Note [Read framing]: a ReadResponse carries up to RequestLimits::max_bindings byte fields
// (tag + length varint: at most 11 bytes each) around at most --max_message_bytes of payload.
int MaxSendMessageBytes(int max_message_bytes) {
  const int64_t framing = int64_t{RequestLimits{}.max_bindings} * 16 + 4096;
  return static_cast<int>(
      std::min<int64_t>(int64_t{max_message_bytes} + framing, std::numeric_limits<int>::max()));
}

// Exit status after a device was lost (docs/error-model.md rule 5): non-zero, so that systemd's
// Restart=on-failure starts a fresh daemon with a fresh CUDA context.
constexpr int kDeviceLostExitCode = 3;
// Between NOT_SERVING and the exit, so that calls in flight get their UNAVAILABLE answers and
// health checks can see NOT_SERVING.
constexpr absl::Duration kDeviceLostGrace = absl::Seconds(1);

// Makes the socket's directory (0700 when we create it) and removes a stale socket file. A live
// daemon on the same path is an error rather than something to steal from.
absl::Status PrepareUnixSocket(const std::string& path) {
  if (path.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("--listen: socket path '", path,
                                                   "' is longer than ",
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

absl::StatusOr<std::string> ReadPem(const std::string& path, absl::string_view flag) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  if (!in || ss.str().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read ", path));
  }
  return ss.str();
}

// TLS (optionally requiring a client certificate) or, with --insecure_tcp, plain TCP.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> TcpCredentials(
    const DaemonConfig& config) {
  if (config.insecure_tcp) {
    spdlog::warn(
        "--insecure_tcp: serving plain TCP on {}: no encryption, and bearer tokens travel in "
        "clear text; use --tls_cert/--tls_key outside a trusted network",
        config.tcp_address);
    if (config.auth_config.empty()) {
      spdlog::warn(
          "--insecure_tcp without --auth_config: EVERY peer that reaches {} may call EVERY RPC, "
          "with no token, as one shared principal 'insecure-tcp' (so each other's sessions "
          "too); give --auth_config to require tokens",
          config.tcp_address);
    }
    return grpc::InsecureServerCredentials();
  }
  grpc::SslServerCredentialsOptions options;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  ASSIGN_OR_RETURN(pair.cert_chain, ReadPem(config.tls_cert, "--tls_cert"));
  ASSIGN_OR_RETURN(pair.private_key, ReadPem(config.tls_key, "--tls_key"));
  options.pem_key_cert_pairs.push_back(std::move(pair));
  if (!config.tls_client_ca.empty()) {
    ASSIGN_OR_RETURN(options.pem_root_certs, ReadPem(config.tls_client_ca, "--tls_client_ca"));
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  spdlog::info("TCP {}: TLS{}", config.tcp_address,
               config.tls_client_ca.empty() ? "" : " with client certificates (mTLS)");
  return grpc::SslServerCredentials(options);
}

absl::Status WriteReadyFile(const std::string& path, const DaemonConfig& config, int tcp_port,
                            const std::string& metrics_address, int health_port) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    if (!config.unix_socket.empty()) out << "unix=unix:" << config.unix_socket << "\n";
    if (!config.tcp_address.empty()) {
      const std::string host = config.tcp_address.substr(0, config.tcp_address.rfind(':'));
      out << "tcp=" << host << ":" << tcp_port << "\n";
    }
    if (!metrics_address.empty()) out << "metrics=" << metrics_address << "\n";
    if (!config.health_listen.empty()) {
      const std::string host = config.health_listen.substr(0, config.health_listen.rfind(':'));
      out << "health=" << host << ":" << health_port << "\n";
    }
    out.close();  // Flushes: a full disk or a file-size limit fails here.
    if (!out) {
      std::remove(tmp.c_str());
      return absl::FailedPreconditionError(absl::StrCat("--ready_file: cannot write ", tmp));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::FailedPreconditionError(absl::StrCat("--ready_file: cannot rename to ", path));
  }
  return absl::OkStatus();
}

// Note [Device lost] (server/compute/cuda/cuda_server.h): health NOT_SERVING, then exit non-zero
// after a grace period. No orderly Shutdown: the device's context is unusable, and Shutdown must
// not run on the loop or completion thread that calls this.
void ExitAfterDeviceLost(HealthService* health, const std::string& unix_socket,
                         const absl::Status& status) {
  spdlog::critical("device lost ({}): health NOT_SERVING; exiting with status {} in {}",
                   std::string(status.message()), kDeviceLostExitCode,
                   absl::FormatDuration(kDeviceLostGrace));
  if (health != nullptr) health->SetServing(false);
  (void)SystemdNotifier::FromEnvironment().Notify(absl::StrCat(
      "STATUS=device lost: ", status.message(), "; exiting with status ", kDeviceLostExitCode));
  std::thread([unix_socket] {
    absl::SleepFor(kDeviceLostGrace);
    if (!unix_socket.empty()) unlink(unix_socket.c_str());
    spdlog::default_logger()->flush();
    _exit(kDeviceLostExitCode);
  }).detach();
}

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
  RETURN_IF_ERROR(d->StartDevices());
  RETURN_IF_ERROR(d->LoadPolicy());
  RETURN_IF_ERROR(d->RestoreSessions());
  d->StartServices();
  RETURN_IF_ERROR(d->StartGrpc());
  RETURN_IF_ERROR(d->StartHealthListener());
  d->StartLocalSockets();
  d->health_->SetServing(true);
  RETURN_IF_ERROR(d->StartMetricsHttp());
  if (!config.ready_file.empty()) {
    RETURN_IF_ERROR(WriteReadyFile(config.ready_file, config, d->tcp_port_, d->metrics_address_,
                                   d->health_port_));
  }
  d->StartLivenessAndNotify();
  return d;
}

absl::StatusOr<std::vector<uint32_t>> Daemon::DeviceOrdinals() const {
  if (!config_.devices.all) return config_.devices.ordinals;
  // --devices=all: every CUDA device (the cpu backend has --cpu_devices instead).
  absl::StatusOr<uint32_t> count = CudaDeviceCount();
  if (!count.ok() && config_.backend == BackendChoice::kAuto) {
    spdlog::info("--devices=all: no cuda ({}); one cpu device",
                 std::string(count.status().message()));
    return std::vector<uint32_t>{0};
  }
  if (!count.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("--devices=all: ", count.status().message()));
  }
  if (*count == 0) return absl::FailedPreconditionError("--devices=all: no cuda device here");
  if (*count > kMaxDevices) {
    spdlog::warn("--devices=all: this machine has {} cuda devices; serving the first {}", *count,
                 kMaxDevices);
  }
  std::vector<uint32_t> ordinals;
  for (uint32_t i = 0; i < std::min(*count, kMaxDevices); ++i) ordinals.push_back(i);
  return ordinals;
}

absl::Status Daemon::StartDevices() {
  // Note [Device selection] (config.h): one backend, Device and loop per ordinal; sessions carry
  // their device's index in their id's low byte.
  ASSIGN_OR_RETURN(const std::vector<uint32_t> ordinals, DeviceOrdinals());
  BackendChoice backend = config_.backend;
  // TEST ONLY (Note [Lost devices]): an environment variable, never a flag or an RPC.
  const char* lost_file = std::getenv("CUBED_TEST_LOSE_DEVICE_FILE");
  for (uint32_t index = 0; index < ordinals.size(); ++index) {
    BackendOptions backend_options;
    backend_options.backend = backend;
    backend_options.device = ordinals[index];
    backend_options.index = index;
    backend_options.cpu_devices =
        config_.backend == BackendChoice::kCpu ? static_cast<uint32_t>(ordinals.size()) : 1;
    backend_options.memory_limit = config_.memory_limit;
    backend_options.kernel_cache_dir = config_.kernel_cache_dir;
    backend_options.completion_spin = config_.completion_spin;
    if (lost_file != nullptr) backend_options.test_lost_file = absl::StrCat(lost_file, ".", index);
    backend_options.on_device_lost = [this, index](const absl::Status& status) {
      OnDeviceLost(index, status);
    };
    absl::StatusOr<std::unique_ptr<ComputeServer>> created =
        CreateBackend(std::move(backend_options));
    if (!created.ok()) {
      if (ordinals.size() == 1) return created.status();
      return absl::Status(created.status().code(),
                          absl::StrCat("device ", index, " (ordinal ", ordinals[index],
                                       "): ", created.status().message()));
    }
    std::unique_ptr<ComputeServer> server = *std::move(created);
    const DeviceDescription& desc = server->Description();
    // `auto` decides once, on the first device; the others get the same backend.
    backend = desc.backend == DeviceDescription::Backend::kCuda ? BackendChoice::kCuda
                                                                : BackendChoice::kCpu;
    spdlog::info("device {}: {}{} ({} MiB limit, alignment {})", desc.index, desc.name,
                 backend == BackendChoice::kCuda
                     ? absl::StrCat(" (cuda ordinal ", ordinals[index], ")")
                     : "",
                 desc.memory_limit >> 20, desc.alignment);
    DeviceOptions device_options;
    device_options.default_lease = config_.session_lease;
    device_options.allow_unchecked = config_.allow_unchecked;
    // Note [Read framing]: a read may return --max_message_bytes of payload (what one Create
    // can bring); its response's framing travels in the send limit's slack.
    device_options.max_read_bytes = static_cast<uint64_t>(config_.max_message_bytes);
    device_options.max_region_bytes = config_.max_region_bytes;
    loops_.push_back(std::make_unique<DeviceLoop>(
        std::make_unique<Device>(index, std::move(server), device_options), config_.loop_spin));
  }
  absl::MutexLock lock(&lost_mu_);
  lost_.assign(loops_.size(), false);
  return absl::OkStatus();
}

// Note [Lost devices]: a device whose backend reports itself lost (Note [Device lost],
// server/compute/cuda/cuda_server.h) fails every later call naming it UNAVAILABLE (Device checks
// its backend), and its health name ("device/N", health_service.h) and its metric
// cubed_device_up turn NOT_SERVING and 0; the other devices and their sessions carry on, and the
// daemon as a whole stays SERVING. Once every device is lost the daemon is of no use any more:
// health NOT_SERVING, and exit non-zero so that the supervisor restarts it with fresh contexts.
// Tests lose a CPU device through CUBED_TEST_LOSE_DEVICE_FILE (the environment, never a flag or
// an RPC: BackendOptions::test_lost_file).
void Daemon::OnDeviceLost(uint32_t index, const absl::Status& status) {
  bool all_lost = false;
  {
    absl::MutexLock lock(&lost_mu_);
    if (index < lost_.size()) lost_[index] = true;
    all_lost = std::all_of(lost_.begin(), lost_.end(), [](bool lost) { return lost; });
  }
  if (health_ != nullptr) health_->SetDeviceServing(index, false);
  if (all_lost) {
    ExitAfterDeviceLost(health_.get(), config_.unix_socket, status);
    return;
  }
  spdlog::critical("device {} lost ({}): its health NOT_SERVING; the other devices serve on", index,
                   std::string(status.message()));
  (void)SystemdNotifier::FromEnvironment().Notify(
      absl::StrCat("STATUS=device ", index, " lost: ", status.message(), "; serving the others"));
}

void Daemon::StartServices() {
  std::vector<DeviceLoop*> loops;
  for (auto& loop : loops_) loops.push_back(loop.get());
  metrics_ = std::make_unique<Metrics>();
  stats_ = std::make_unique<StatsCollector>(loops, metrics_.get(), [this] {
    StreamCounts counts;
    if (streams_ != nullptr) counts.open_streams = streams_->open_streams();
    if (ring_listener_ != nullptr) {
      counts.open_rings = ring_listener_->open_rings();
      counts.rings_opened = ring_listener_->rings_opened();
    }
    return counts;
  });
  compute_ = std::make_unique<ComputeService>(loops, RequestLimits{}, metrics_.get(), stats_.get());
  compute_->SetDrainHandler(
      [this](bool checkpoint, auto done) { OnDrain(checkpoint, std::move(done)); });
  health_ = std::make_unique<HealthService>(static_cast<uint32_t>(loops_.size()));
  SessionStreamLimits stream_limits;
  stream_limits.fast_execute_decode = config_.fast_execute_decode;
  streams_ =
      std::make_unique<SessionStreamService>(loops, RequestLimits{}, stream_limits, metrics_.get());
}

absl::Status Daemon::StartGrpc() {
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(config_.max_message_bytes);
  builder.SetMaxSendMessageSize(MaxSendMessageBytes(config_.max_message_bytes));
  builder.RegisterService(compute_.get());
  builder.RegisterService(health_.get());
  builder.RegisterService(streams_.get());
  {
    // One log line per failed call, with method, session and request id (request_log.h).
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
    creators.push_back(RequestLogFactory());
    // Calls in flight, for shutdown (Note [Idle connections at shutdown]).
    calls_ = std::make_unique<CallCounter>();
    creators.push_back(calls_->InterceptorFactory());
    builder.experimental().SetInterceptorCreators(std::move(creators));
  }
  // docs/security.md (LoadPolicy). The Unix socket is ours (Note [Unix peer credentials],
  // unix_listener.h).
  if (!config_.unix_socket.empty()) {
    RETURN_IF_ERROR(PrepareUnixSocket(config_.unix_socket));
    ASSIGN_OR_RETURN(unix_listener_,
                     UnixListener::Listen(config_.unix_socket, config_.listen_group));
  }
  auth_ = std::make_unique<Authenticator>(std::move(policy_), unix_listener_.get());
  compute_->SetAuthenticator(auth_.get());
  streams_->SetAuthenticator(auth_.get());
  if (!config_.tcp_address.empty()) {
    ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials, TcpCredentials(config_));
    builder.AddListeningPort(config_.tcp_address, credentials, &tcp_port_);
  }
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || (!config_.tcp_address.empty() && tcp_port_ == 0)) {
    return absl::UnavailableError(
        absl::StrCat("could not start serving on ",
                     config_.unix_socket.empty() ? "" : "unix:" + config_.unix_socket, " ",
                     config_.tcp_address, " (address in use, or a bad host:port?)"));
  }
  if (unix_listener_ != nullptr) {
    unix_listener_->Start(server_.get());
    spdlog::info("serving on unix:{}", config_.unix_socket);
  }
  if (tcp_port_ != 0) spdlog::info("serving on tcp port {}", tcp_port_);
  return absl::OkStatus();
}

// Note [Health listener]: Kubernetes' grpc probes (deploy/k8s) connect in plain text and cannot
// present TLS, a token or a Unix socket, so a daemon whose only TCP listener is TLS cannot be
// probed there. --health_listen serves the same HealthService (so the same SERVING and
// NOT_SERVING) on a second gRPC server that holds nothing else: no Compute, no session stream, no
// authentication to bypass. Health answers anyone on the other listeners too (docs/security.md);
// reflection, which every server of this process has, describes only what that server serves.
absl::Status Daemon::StartHealthListener() {
  if (config_.health_listen.empty()) return absl::OkStatus();
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(4096);
  builder.RegisterService(health_.get());
  builder.AddListeningPort(config_.health_listen, grpc::InsecureServerCredentials(), &health_port_);
  health_server_ = builder.BuildAndStart();
  if (health_server_ == nullptr || health_port_ == 0) {
    return absl::UnavailableError(absl::StrCat("--health_listen: could not serve on ",
                                               config_.health_listen,
                                               " (address in use, or a bad host:port?)"));
  }
  spdlog::info("serving grpc.health.v1 alone on {} (plain text, port {})", config_.health_listen,
               health_port_);
  return absl::OkStatus();
}

void Daemon::StartLocalSockets() {
  if (config_.unix_socket.empty()) return;
  // Clients fall back to the gRPC stream without these sockets, so one that cannot be made (a
  // path too long for sun_path, say) is a warning, not a failure.
  if (config_.max_region_bytes > 0) {
    // Note [Shared-memory regions] (server/channel/shared_region.h).
    const std::string path = RegionSocketPath(config_.unix_socket);
    std::vector<DeviceLoop*> loops;
    for (auto& loop : loops_) loops.push_back(loop.get());
    RegionListenerOptions options;
    options.max_region_bytes = config_.max_region_bytes;
    const absl::Status prepared = PrepareUnixSocket(path);
    absl::StatusOr<std::unique_ptr<RegionListener>> regions =
        prepared.ok() ? RegionListener::Listen(path, config_.listen_group, options, auth_.get(),
                                               std::move(loops))
                      : prepared;
    if (regions.ok()) {
      region_listener_ = *std::move(regions);
      region_listener_->Start();
      spdlog::info("shared-memory regions on {} (at most {} bytes each)", path,
                   config_.max_region_bytes);
    } else {
      spdlog::warn("no shared-memory regions: {}", std::string(regions.status().message()));
    }
  }
  if (config_.command_ring) {
    // Note [Command ring] (common/shm_ring.h).
    const std::string path = RingSocketPath(config_.unix_socket);
    RingListenerOptions options;
    options.max_request_bytes = static_cast<uint64_t>(config_.max_message_bytes);
    options.spin = config_.ring_spin;
    const absl::Status prepared = PrepareUnixSocket(path);
    absl::StatusOr<std::unique_ptr<RingListener>> rings =
        prepared.ok()
            ? RingListener::Listen(path, config_.listen_group, options, auth_.get(), streams_.get())
            : prepared;
    if (rings.ok()) {
      ring_listener_ = *std::move(rings);
      ring_listener_->Start();
      spdlog::info("command rings on {} (spin {})", path, absl::FormatDuration(config_.ring_spin));
    } else {
      spdlog::warn("no command rings: {}", std::string(rings.status().message()));
    }
  }
}

absl::Status Daemon::StartMetricsHttp() {
  if (config_.metrics_listen.empty()) return absl::OkStatus();
  const StatsCollector* stats = stats_.get();
  ASSIGN_OR_RETURN(
      metrics_http_,
      MetricsHttpServer::Start(config_.metrics_listen, [stats]() -> absl::StatusOr<std::string> {
        ASSIGN_OR_RETURN(StatsSnapshot s, stats->CollectFor(absl::Seconds(5)));
        return PrometheusText(s);
      }));
  metrics_address_ = metrics_http_->address();
  spdlog::info("serving metrics on http://{}/metrics", metrics_address_);
  return absl::OkStatus();
}

void Daemon::StartLivenessAndNotify() {
  std::vector<DeviceLoop*> loops;
  for (auto& loop : loops_) loops.push_back(loop.get());
  const SystemdNotifier notifier = SystemdNotifier::FromEnvironment();
  LivenessOptions liveness;
  liveness.stall_timeout = config_.loop_stall_timeout;
  // TEST ONLY (tests/systemd): an environment variable, never a flag or an RPC.
  if (const char* wedge = std::getenv("CUBED_TEST_WEDGE_FILE")) liveness.wedge_file = wedge;
  HealthService* health = health_.get();
  liveness_ = std::make_unique<LivenessMonitor>(
      loops, liveness, notifier,
      [health](bool responsive) { health->SetLoopsResponsive(responsive); });
  if (notifier.watchdog_interval().has_value()) {
    spdlog::info("systemd watchdog on: WATCHDOG=1 every {} while every device loop answers",
                 absl::FormatDuration(liveness_->period()));
  }
  const std::string where =
      absl::StrCat(config_.unix_socket.empty() ? "" : " unix:" + config_.unix_socket,
                   tcp_port_ == 0 ? "" : absl::StrCat(" tcp port ", tcp_port_));
  if (absl::Status s = notifier.Notify(absl::StrCat("READY=1\nSTATUS=serving on", where));
      !s.ok()) {
    spdlog::warn("systemd notify: {}", std::string(s.message()));
  }
}

void Daemon::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  spdlog::info("shutting down: no new calls; waiting for calls in flight");
  (void)SystemdNotifier::FromEnvironment().Notify("STOPPING=1\nSTATUS=shutting down");
  if (liveness_ != nullptr) liveness_->Stop();          // Before the loops stop; ends WATCHDOG=1.
  if (metrics_http_ != nullptr) metrics_http_->Stop();  // Scrapes read the loops: before they stop.
  compute_->StartDraining();
  // Note [Checkpoint and restore]: before the streams end, which closes their sessions.
  CheckpointAtShutdown();
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
  if (unix_listener_ != nullptr) unix_listener_->Stop();  // No new connections.
  if (region_listener_ != nullptr) region_listener_->Stop();
  // The streams were told to end above; a ring whose client does not read its end record is
  // stopped here, before the loops.
  if (ring_listener_ != nullptr) ring_listener_->Stop();
  // Note [Idle connections at shutdown]: Server::Shutdown(deadline) sends every connection a
  // GOAWAY and then waits, until the deadline, for every connection to be gone, not only for the
  // calls in flight. gRPC 1.51 closes a connection early only once its client has answered the
  // GOAWAY's PING (or closed it), and a client that merely holds an idle channel often reads
  // nothing, so answers nothing (a channel with no call running in a process where nothing polls:
  // Python's sync channels, the C++ SDK; a stopped process): each such client held the exit up
  // for the whole 5 s, over TCP as over the Unix socket (before and after UnixListener). So
  // Shutdown runs on a helper thread while this one watches the calls in flight (CallCounter, an
  // interceptor on every call); whenever none is left it drops the remaining connections, which
  // is what Shutdown itself does at its deadline (grpc_server_cancel_all_calls). It checks every
  // 20 ms, so connections that raced with the shutdown go too, and in-flight calls still drain
  // for up to 5 s as before. A call a client starts after that on a dropped connection fails
  // UNAVAILABLE, as at the deadline.
  absl::Notification server_down;
  std::thread drain([this, &server_down] {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    server_down.Notify();
  });
  while (!server_down.WaitForNotificationWithTimeout(absl::Milliseconds(20))) {
    if (calls_->in_flight() == 0) grpc_server_cancel_all_calls(server_->c_server());
  }
  drain.join();
  server_->Wait();
  // Probes see NOT_SERVING until here; a probe holds no call open, so this takes no time.
  if (health_server_ != nullptr) {
    health_server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    health_server_->Wait();
  }
  for (auto& loop : loops_) loop->Stop();  // Closes every session, frees every page.
  loops_.clear();
  if (!config_.unix_socket.empty()) unlink(config_.unix_socket.c_str());
  if (region_listener_ != nullptr) unlink(RegionSocketPath(config_.unix_socket).c_str());
  if (ring_listener_ != nullptr) unlink(RingSocketPath(config_.unix_socket).c_str());
  spdlog::info("shut down cleanly");
}

Daemon::~Daemon() {
  if (server_ != nullptr) Shutdown();
  server_.reset();  // Before the services registered with it.
  health_server_.reset();
}

}  // namespace cubed
