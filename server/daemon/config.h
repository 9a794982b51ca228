#pragma once

// DaemonConfig: everything the daemon is configured with, read from its flags (--flagfile
// works too). Flags are defined in config.cc; `cubed --help` lists them.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/compute/backend_registry.h"  // BackendChoice.

namespace cubed {

// Most devices one daemon serves, whatever the backend (--devices, --cpu_devices; session ids
// carry the device's index in their low byte).
inline constexpr uint32_t kMaxDevices = 16;

// Note [Device selection]: the devices a daemon serves are one list of backend ordinals, device
// index i (what OpenSession, GetInfo and session ids name) serving ordinal ordinals[i], each with
// its own backend (memory pool, kernel cache, stream), Device and loop. --devices=all|0,1,...
// (CUDA), --device=N (the same as --devices=N) and --cpu_devices=N (CPU ordinals 0 .. N-1) only
// fill that list; the daemon builds every device the same way from it (Daemon::StartDevices).
struct DeviceSelection {
  bool all = false;                      // Every device the backend has, counted at start (CUDA).
  std::vector<uint32_t> ordinals = {0};  // Without `all`: distinct, 1 .. kMaxDevices of them.
};

struct DaemonConfig {
  std::string unix_socket;  // Path (--listen without its unix: prefix); empty = no Unix listener.
  std::string tcp_address;  // host:port; empty = no TCP listener.
  BackendChoice backend = BackendChoice::kAuto;
  DeviceSelection devices;    // Note [Device selection].
  uint64_t memory_limit = 0;  // Bytes, per device; 0 = backend default.
  absl::Duration session_lease = absl::Seconds(60);
  std::string log_level = "info";
  int max_message_bytes = 512 << 20;
  // Most bytes of shared-memory regions per session (region_listener.h); 0 = no region socket.
  uint64_t max_region_bytes = uint64_t{16} << 30;
  // Session streams over command rings (ring_listener.h); off: no ring socket.
  bool command_ring = true;
  // Session streams decode builtin executes without protobuf (Note [Fast execute decode]).
  bool fast_execute_decode = false;
  absl::Duration ring_spin = absl::ZeroDuration();  // A ring thread's spin before sleeping.
  absl::Duration loop_spin = absl::ZeroDuration();  // The device loop's (Note [Loop spin]).
  // CUDA's completion thread's (Note [Completion spin]).
  absl::Duration completion_spin = absl::ZeroDuration();
  bool allow_unchecked = false;
  std::string ready_file;        // Written once serving; empty = none.
  std::string kernel_cache_dir;  // On-disk cache of compiled CUDA kernels; empty = memory only.
  // Checkpoint and restore (Note [Checkpoint and restore], server/channel/device.h).
  std::string checkpoint_dir;                          // Empty = no checkpoint on SIGTERM or drain.
  uint64_t checkpoint_max_bytes = uint64_t{16} << 30;  // Largest checkpoint written.
  std::string restore_dir;  // Checkpoint restored at start; empty = none.
  // Authentication and authorization (docs/security.md).
  std::string auth_config;     // Textproto of cubed.v1.AuthConfig; empty = the default policy.
  std::string listen_group;    // Group (name or number) of the Unix socket; empty = ours.
  std::string tls_cert;        // PEM server certificate (chain) of the TCP listener.
  std::string tls_key;         // PEM private key of tls_cert.
  std::string tls_client_ca;   // PEM CA bundle: clients must present a certificate it signed.
  bool insecure_tcp = false;   // Plain TCP (no TLS) allowed on --tcp.
  std::string metrics_listen;  // HOST:PORT of the Prometheus endpoint; empty = off.
  // HOST:PORT of the plain-text listener that serves grpc.health.v1 only (Note [Health
  // listener], daemon.cc); empty = off.
  std::string health_listen;
  // A device loop that has not run a task this long makes health NOT_SERVING (liveness_monitor.h).
  absl::Duration loop_stall_timeout = absl::Seconds(10);
};

// Parses argv into the flags (--flagfile too), exiting with status 1 and a message on an unknown
// or malformed flag as absl::ParseCommandLine does. The usage flags print to stdout and return
// the status to exit with, 0: --help the daemon's own flags, --helpfull every flag, --version the
// version. nullopt when the daemon is to run.
std::optional<int> ParseFlags(int argc, char** argv);

// Reads the flags (after ParseFlags). INVALID_ARGUMENT naming the flag when a value
// is malformed or out of range, or when no listener is configured.
absl::StatusOr<DaemonConfig> ConfigFromFlags();

// The TCP listener is TLS (cert and key), or plain with insecure_tcp, never neither or both; TLS
// flags need --tcp. INVALID_ARGUMENT naming the flags otherwise.
absl::Status CheckTransportSecurity(const DaemonConfig& config);

// The socket path a Unix socket flag (`flag`, e.g. "--listen") names: `value` is PATH,
// unix:PATH or unix:///ABSOLUTE_PATH (gRPC's forms, which the daemon prints and cubectl takes);
// "" stays "" (no socket). INVALID_ARGUMENT naming the flag, the value and the accepted forms for
// any other scheme (tcp:, dns:, unix-abstract:, http://...) or a host:port.
absl::StatusOr<std::string> ParseUnixSocketFlag(absl::string_view flag, absl::string_view value);

// Parses --devices: "all", or ordinals separated by commas ("0", "0,1,3"). INVALID_ARGUMENT
// naming the flag, the value and what is wrong: an empty or non-numeric entry, an ordinal listed
// twice (unless `allow_repeats`: Note [Repeated test devices], config.cc), more than kMaxDevices
// of them.
absl::StatusOr<DeviceSelection> ParseDevicesFlag(absl::string_view value,
                                                 bool allow_repeats = false);

// Parses "1048576", "64MiB", "8GiB", "512KiB", "1.5GiB" into bytes. INVALID_ARGUMENT otherwise.
absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text);

// The default Unix socket: $XDG_RUNTIME_DIR/cubed.sock, else /tmp/cubed-$UID/cubed.sock.
std::string DefaultUnixSocket();

}  // namespace cubed
