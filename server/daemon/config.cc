#include "server/daemon/config.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/flags/internal/parse.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

ABSL_FLAG(std::string, listen, cubed::DefaultUnixSocket(),
          "Unix socket to serve on: PATH or unix:PATH (no other scheme; TCP is --tcp); empty "
          "for none.");
ABSL_FLAG(std::string, tcp, "",
          "host:port to also serve on over TCP (port 0 picks a free port); empty for none.");
ABSL_FLAG(std::string, backend, "auto", "auto, cpu or cuda.");
ABSL_FLAG(uint32_t, device, 0,
          "Ordinal of the one device to serve (cuda); the same as --devices=N.");
ABSL_FLAG(std::string, devices, "",
          "CUDA devices to serve: all, or ordinals separated by commas (0,1), at most 16: each "
          "its own device loop, stream, memory pool (--memory_limit each), kernel cache and "
          "sessions; clients pick one by its index in this list when they open a session. "
          "Empty: --device alone. With --backend=cpu only all, the --cpu_devices devices.");
ABSL_FLAG(uint32_t, cpu_devices, 1,
          "Devices the cpu backend serves, 1 .. 16: each its own device loop, memory pool "
          "(--memory_limit each; 0 = half of RAM shared equally) and sessions; clients pick one "
          "when they open a session. --backend=cpu only.");
ABSL_FLAG(std::string, memory_limit, "0",
          "Most device memory each device's pool may hold, e.g. 8GiB; 0 = half of RAM on cpu "
          "(shared by --cpu_devices), 90% of the free memory on cuda.");
ABSL_FLAG(absl::Duration, session_lease, absl::Seconds(60),
          "Default session lease: a session idle this long is closed and its memory freed.");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error or off.");
ABSL_FLAG(std::string, max_message_bytes, "512MiB",
          "Largest gRPC message received or sent (and so the largest Create or Read).");
ABSL_FLAG(std::string, max_region_bytes, "16GiB",
          "Most bytes of shared-memory regions one session may hold (the region socket, "
          "--listen's path + \".regions\"; page-locked on CUDA); 0 = no region socket.");
ABSL_FLAG(bool, command_ring, true,
          "Serve session streams over shared-memory command rings (the ring socket, --listen's "
          "path + \".ring\"; Note [Command ring]).");
ABSL_FLAG(bool, fast_execute_decode, false,
          "Decode session streams' builtin executes straight from their wire bytes instead of "
          "through protobuf (Note [Fast execute decode]); off until measured on a GPU host.");
ABSL_FLAG(int32_t, ring_spin_us, -1,
          "Microseconds a command ring's thread spins before it sleeps; -1 = 50 on hosts with 8 "
          "or more cores, else 0.");
ABSL_FLAG(int32_t, loop_spin_us, -1,
          "Microseconds the device loop watches for the next task after running some, before "
          "it sleeps (Note [Loop spin]); -1 = 50 on hosts with 8 or more cores, else 0.");
ABSL_FLAG(int32_t, completion_spin_us, -1,
          "CUDA: microseconds the completion thread polls for finished work (a read's copy, a "
          "sync) before it sleeps on it (Note [Completion spin]); -1 = 50 on hosts with 8 or "
          "more cores, else 0.");
ABSL_FLAG(bool, allow_unchecked, false,
          "Allow kernels in unchecked mode (no bounds checks; a bad kernel can corrupt memory).");
ABSL_FLAG(std::string, ready_file, "",
          "File written once the daemon serves, with lines unix=ADDRESS and tcp=HOST:PORT.");

ABSL_FLAG(std::string, kernel_cache_dir, "",
          "Directory caching CUDA kernels compiled by NVRTC across restarts (created if "
          "missing); empty = memory only.");

ABSL_FLAG(std::string, checkpoint_dir, "",
          "Directory (created 0700) that SIGTERM and `cubectl drain --checkpoint` write every "
          "session to before the daemon exits, for a daemon started with --restore; empty = "
          "SIGTERM writes nothing and drain --checkpoint is refused.");
ABSL_FLAG(std::string, checkpoint_max_bytes, "16GiB",
          "Largest checkpoint (manifest + data) written to --checkpoint_dir; a bigger one is "
          "refused, writing nothing.");
ABSL_FLAG(std::string, restore, "",
          "Checkpoint directory to restore sessions from before serving. The whole checkpoint "
          "is verified first; a corrupt, partial or unreadable one makes the daemon exit "
          "(status 1) naming the file and the fault, restoring nothing.");

ABSL_FLAG(absl::Duration, loop_stall_timeout, absl::Seconds(10),
          "A device loop that has not run a task for this long (a wedged or overlong task) "
          "makes health NOT_SERVING until it runs tasks again.");

ABSL_FLAG(std::string, metrics_listen, "",
          "HOST:PORT to serve Prometheus metrics on over HTTP (GET /metrics; port 0 picks a free "
          "port; no authentication: bind loopback); empty = off.");

ABSL_FLAG(std::string, health_listen, "",
          "HOST:PORT to serve grpc.health.v1 alone on over plain-text gRPC (Kubernetes' grpc "
          "probes, which cannot speak TLS; port 0 picks a free port; no other service there); "
          "empty = off.");

ABSL_FLAG(std::string, auth_config, "",
          "Principals, permissions and quotas (textproto of cubed.v1.AuthConfig, see "
          "docs/security.md); empty = Unix peers with the daemon's uid or root may do anything.");
ABSL_FLAG(std::string, listen_group, "",
          "Group (name or number) that owns the Unix socket (mode 0660); empty = the daemon's.");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate chain of the TCP listener (TLS).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA bundle; when set, TCP clients must present a certificate it signed (mTLS).");
ABSL_FLAG(bool, insecure_tcp, false,
          "Serve --tcp without TLS (tokens and data travel in clear text; logs a warning). "
          "WITHOUT --auth_config EVERY PEER THAT REACHES THE PORT MAY CALL EVERY RPC, with no "
          "token, and all such peers share one principal (each other's sessions).");

namespace cubed {
namespace {

// Every flag of the daemon is defined above; --help lists the flags of this file.
constexpr absl::string_view kFlagsFile = __FILE__;
constexpr absl::string_view kFlagsFileShown = "server/daemon/config.cc";

// Names a flag's file in --help output: this file as kFlagsFileShown (not the build machine's
// path), any other without leading slashes (Abseil's default).
std::string ShownFlagsFile(absl::string_view file) {
  if (file == kFlagsFile) return std::string(kFlagsFileShown);
  const size_t start = file.find_first_not_of('/');
  return start == absl::string_view::npos ? "" : std::string(file.substr(start));
}

bool IsDaemonFlagsFile(absl::string_view shown_file) { return shown_file == kFlagsFileShown; }

// A spin flag (--ring_spin_us, --loop_spin_us, --completion_spin_us): -1 = 50 us on hosts with 8 or
// more cores (a spinning thread must not take a core that the work needs), else 0; at most 10 ms.
absl::StatusOr<absl::Duration> SpinFlag(absl::string_view name, int32_t us) {
  if (us < -1 || us > 10000) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, "=", us, ": expected -1 (automatic) or 0 .. 10000"));
  }
  if (us >= 0) return absl::Microseconds(us);
  return std::thread::hardware_concurrency() >= 8 ? absl::Microseconds(50) : absl::ZeroDuration();
}

// Note [Device selection]: --devices, --device and --cpu_devices into one list of ordinals.
absl::StatusOr<DeviceSelection> DeviceSelectionFromFlags(BackendChoice backend) {
  const std::string devices = absl::GetFlag(FLAGS_devices);
  const uint32_t device = absl::GetFlag(FLAGS_device);
  const uint32_t cpu_devices = absl::GetFlag(FLAGS_cpu_devices);
  if (cpu_devices < 1 || cpu_devices > kMaxDevices) {
    return absl::InvalidArgumentError(
        absl::StrCat("--cpu_devices=", cpu_devices, ": expected 1 .. ", kMaxDevices));
  }
  if (cpu_devices > 1 && backend != BackendChoice::kCpu) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--cpu_devices=", cpu_devices,
        " needs --backend=cpu (for several cuda devices use --devices=all or --devices=0,1)"));
  }
  if (backend == BackendChoice::kCpu && device != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device=", device,
                     ": the cpu backend has no device ordinals (its devices are --cpu_devices)"));
  }
  DeviceSelection selection;
  if (devices.empty()) {
    selection.ordinals.clear();
    if (backend == BackendChoice::kCpu) {
      for (uint32_t i = 0; i < cpu_devices; ++i) selection.ordinals.push_back(i);
    } else {
      selection.ordinals.push_back(device);
    }
    return selection;
  }
  // Note [Repeated test devices]: a GPU listed twice is two devices of the daemon (two
  // backends, streams, pools and loops over one GPU), so that a host with one GPU runs the paths
  // between two CUDA devices (copies, a lost device). Tests only: the environment variable
  // CUBED_TEST_REPEAT_DEVICES=1 of the daemon's process, never a flag; production refuses a
  // repeated ordinal, which would split one GPU's memory between two pools.
  const char* repeat = std::getenv("CUBED_TEST_REPEAT_DEVICES");
  ASSIGN_OR_RETURN(selection,
                   ParseDevicesFlag(devices, repeat != nullptr && std::string(repeat) == "1"));
  if (backend == BackendChoice::kCpu) {
    // The cpu backend's devices are --cpu_devices; "all" names them all.
    if (!selection.all) {
      return absl::InvalidArgumentError(
          absl::StrCat("--devices=", devices,
                       ": the cpu backend takes --cpu_devices=N (and --devices=all, which names "
                       "those N), not ordinals"));
    }
    selection.all = false;
    for (uint32_t i = 0; i < cpu_devices; ++i) selection.ordinals.push_back(i);
    return selection;
  }
  if (device != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--devices=", devices, " and --device=", device,
                                                   ": choose one (--devices=", device,
                                                   " is --device=", device, ")"));
  }
  return selection;
}

}  // namespace

std::optional<int> ParseFlags(int argc, char** argv) {
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = IsDaemonFlagsFile;
  usage.contains_helpshort_flags = IsDaemonFlagsFile;
  usage.contains_helppackage_flags = IsDaemonFlagsFile;
  usage.normalize_filename = ShownFlagsFile;
  usage.version_string = [] { return absl::StrCat("cubed ", CUBED_VERSION, "\n"); };
  absl::SetFlagsUsageConfig(std::move(usage));
  // absl::ParseCommandLine is this parse with kHandleUsage, which ends the process with status
  // 1 after --help (Abseil 20220623). Asking for help is no failure: the usage flags are handled
  // here instead, and every one of them ends with 0.
  namespace fi = absl::flags_internal;
  fi::ParseCommandLineImpl(argc, argv, fi::ArgvListAction::kRemoveParsedArgs,
                           fi::UsageFlagsAction::kIgnoreUsage,
                           fi::OnUndefinedFlag::kAbortIfUndefined);
  if (fi::HandleUsageFlags(std::cout, absl::ProgramUsageMessage()) == -1) return std::nullopt;
  std::cout.flush();
  return 0;
}

absl::StatusOr<std::string> ParseUnixSocketFlag(absl::string_view flag, absl::string_view value) {
  const auto refuse = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, "=", value, ": ", why, "; ", flag,
        " takes a Unix socket as PATH or unix:PATH (e.g. /run/cubed/cubed.sock or "
        "unix:/run/cubed/cubed.sock; a relative PATH with a ':' needs a leading ./), or is "
        "empty for none; for TCP use --tcp=HOST:PORT"));
  };
  absl::string_view path = value;
  if (absl::ConsumePrefix(&path, "unix:")) {
    // gRPC's two forms: unix:PATH, and unix://ABSOLUTE_PATH (three slashes in all).
    if (absl::StartsWith(path, "//")) {
      path.remove_prefix(2);
      if (!absl::StartsWith(path, "/")) return refuse("unix:// needs an absolute path");
    }
    if (path.empty()) return refuse("unix: names no path");
    return std::string(path);
  }
  // A ':' before any '/' is a scheme (tcp:, dns:, unix-abstract:, http://...) or a host:port.
  const size_t colon = path.find(':');
  if (colon != absl::string_view::npos &&
      path.substr(0, colon).find('/') == absl::string_view::npos) {
    return refuse(absl::StrCat("'", path.substr(0, colon + 1), "' is not a Unix socket path"));
  }
  return std::string(path);
}

std::string DefaultUnixSocket() {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  if (runtime != nullptr && runtime[0] != '\0') return absl::StrCat(runtime, "/cubed.sock");
  return absl::StrCat("/tmp/cubed-", getuid(), "/cubed.sock");
}

absl::StatusOr<DeviceSelection> ParseDevicesFlag(absl::string_view value, bool allow_repeats) {
  const auto refuse = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("--devices=", value, ": ", why,
                     "; expected all, or device ordinals separated by commas (0,1)"));
  };
  DeviceSelection selection;
  if (absl::AsciiStrToLower(absl::StripAsciiWhitespace(value)) == "all") {
    selection.all = true;
    selection.ordinals.clear();
    return selection;
  }
  selection.ordinals.clear();
  for (absl::string_view entry : absl::StrSplit(value, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    uint32_t ordinal = 0;
    if (entry.empty()) return refuse("an empty entry");
    if (!absl::SimpleAtoi(entry, &ordinal) || entry[0] == '-' || entry[0] == '+') {
      return refuse(absl::StrCat("'", entry, "' is not a device ordinal"));
    }
    if (!allow_repeats && std::find(selection.ordinals.begin(), selection.ordinals.end(),
                                    ordinal) != selection.ordinals.end()) {
      return refuse(absl::StrCat("device ", ordinal, " is listed twice"));
    }
    selection.ordinals.push_back(ordinal);
    if (selection.ordinals.size() > kMaxDevices) {
      return refuse(absl::StrCat("more than ", kMaxDevices, " devices (one daemon serves at most ",
                                 kMaxDevices, ")"));
    }
  }
  return selection;
}

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text) {
  absl::string_view number = absl::StripAsciiWhitespace(text);
  uint64_t scale = 1;
  struct Suffix {
    const char* name;
    uint64_t scale;
  };
  for (Suffix s :
       {Suffix{"KiB", uint64_t{1} << 10}, Suffix{"MiB", uint64_t{1} << 20},
        Suffix{"GiB", uint64_t{1} << 30}, Suffix{"TiB", uint64_t{1} << 40}, Suffix{"B", 1}}) {
    if (absl::ConsumeSuffix(&number, s.name)) {
      scale = s.scale;
      break;
    }
  }
  double value = 0;
  if (number.empty() || !absl::SimpleAtod(number, &value) || !(value >= 0) ||
      value * static_cast<double>(scale) >= 1.8e19) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not a byte size (e.g. 1048576, 512KiB, 64MiB, 8GiB)"));
  }
  return static_cast<uint64_t>(std::llround(value * static_cast<double>(scale)));
}

absl::Status CheckTransportSecurity(const DaemonConfig& c) {
  const bool tls = !c.tls_cert.empty() || !c.tls_key.empty() || !c.tls_client_ca.empty();
  if (tls && (c.tls_cert.empty() || c.tls_key.empty())) {
    return absl::InvalidArgumentError(
        "--tls_cert and --tls_key go together (and --tls_client_ca needs both)");
  }
  if (tls && c.tcp_address.empty()) {
    return absl::InvalidArgumentError("--tls_cert/--tls_key/--tls_client_ca need --tcp");
  }
  if (tls && c.insecure_tcp) {
    return absl::InvalidArgumentError("--insecure_tcp and --tls_cert: choose one for --tcp");
  }
  if (!c.tcp_address.empty() && !tls && !c.insecure_tcp) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tcp=", c.tcp_address,
        " needs TLS (--tls_cert and --tls_key, optionally --tls_client_ca) or, to serve plain "
        "TCP anyway, --insecure_tcp"));
  }
  return absl::OkStatus();
}

absl::StatusOr<DaemonConfig> ConfigFromFlags() {
  DaemonConfig c;
  ASSIGN_OR_RETURN(c.unix_socket, ParseUnixSocketFlag("--listen", absl::GetFlag(FLAGS_listen)));
  c.tcp_address = absl::GetFlag(FLAGS_tcp);
  if (c.unix_socket.empty() && c.tcp_address.empty()) {
    return absl::InvalidArgumentError("--listen and --tcp are both empty: nothing to serve on");
  }
  const std::string backend = absl::AsciiStrToLower(absl::GetFlag(FLAGS_backend));
  if (backend == "auto") {
    c.backend = BackendChoice::kAuto;
  } else if (backend == "cpu") {
    c.backend = BackendChoice::kCpu;
  } else if (backend == "cuda") {
    c.backend = BackendChoice::kCuda;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend=", backend, ": expected auto, cpu or cuda"));
  }
  ASSIGN_OR_RETURN(c.devices, DeviceSelectionFromFlags(c.backend));
  absl::StatusOr<uint64_t> limit = ParseByteSize(absl::GetFlag(FLAGS_memory_limit));
  if (!limit.ok())
    return absl::InvalidArgumentError(absl::StrCat("--memory_limit: ", limit.status().message()));
  c.memory_limit = *limit;
  c.session_lease = absl::GetFlag(FLAGS_session_lease);
  if (c.session_lease <= absl::ZeroDuration() || c.session_lease > absl::Hours(24 * 7)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--session_lease=", absl::FormatDuration(c.session_lease),
                     ": expected more than 0 and at most 168h"));
  }
  c.log_level = absl::GetFlag(FLAGS_log_level);
  absl::StatusOr<uint64_t> max_message = ParseByteSize(absl::GetFlag(FLAGS_max_message_bytes));
  if (!max_message.ok() || *max_message < 4096 || *max_message > 0x7fffffff) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_message_bytes=", absl::GetFlag(FLAGS_max_message_bytes),
                     ": expected 4KiB .. 2GiB-1 (gRPC's limit)"));
  }
  c.max_message_bytes = static_cast<int>(*max_message);
  absl::StatusOr<uint64_t> max_region = ParseByteSize(absl::GetFlag(FLAGS_max_region_bytes));
  if (!max_region.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_region_bytes=", absl::GetFlag(FLAGS_max_region_bytes), ": ",
                     max_region.status().message()));
  }
  c.max_region_bytes = *max_region;
  c.command_ring = absl::GetFlag(FLAGS_command_ring);
  c.fast_execute_decode = absl::GetFlag(FLAGS_fast_execute_decode);
  ASSIGN_OR_RETURN(c.ring_spin, SpinFlag("ring_spin_us", absl::GetFlag(FLAGS_ring_spin_us)));
  ASSIGN_OR_RETURN(c.loop_spin, SpinFlag("loop_spin_us", absl::GetFlag(FLAGS_loop_spin_us)));
  ASSIGN_OR_RETURN(c.completion_spin,
                   SpinFlag("completion_spin_us", absl::GetFlag(FLAGS_completion_spin_us)));
  c.allow_unchecked = absl::GetFlag(FLAGS_allow_unchecked);
  c.ready_file = absl::GetFlag(FLAGS_ready_file);
  c.kernel_cache_dir = absl::GetFlag(FLAGS_kernel_cache_dir);
  c.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  c.restore_dir = absl::GetFlag(FLAGS_restore);
  absl::StatusOr<uint64_t> checkpoint_max =
      ParseByteSize(absl::GetFlag(FLAGS_checkpoint_max_bytes));
  if (!checkpoint_max.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--checkpoint_max_bytes=", absl::GetFlag(FLAGS_checkpoint_max_bytes), ": ",
                     checkpoint_max.status().message()));
  }
  c.checkpoint_max_bytes = *checkpoint_max;
  c.auth_config = absl::GetFlag(FLAGS_auth_config);
  c.listen_group = absl::GetFlag(FLAGS_listen_group);
  c.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  c.tls_key = absl::GetFlag(FLAGS_tls_key);
  c.tls_client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  c.insecure_tcp = absl::GetFlag(FLAGS_insecure_tcp);
  RETURN_IF_ERROR(CheckTransportSecurity(c));
  c.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  c.health_listen = absl::GetFlag(FLAGS_health_listen);
  c.loop_stall_timeout = absl::GetFlag(FLAGS_loop_stall_timeout);
  if (c.loop_stall_timeout < absl::Milliseconds(10) || c.loop_stall_timeout > absl::Hours(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--loop_stall_timeout=", absl::FormatDuration(c.loop_stall_timeout),
                     ": expected 10ms .. 1h"));
  }
  return c;
}

}  // namespace cubed
