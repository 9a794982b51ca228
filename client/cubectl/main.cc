// cubectl: a command-line client of the cubed daemon. main only parses the command line (cli.h)
// and dispatches; each command lives in its group's file (commands.h).

#include <iostream>

#include "absl/status/status.h"
#include "client/cubectl/args.h"
#include "client/cubectl/cli.h"
#include "client/cubectl/commands.h"
#include "client/cubectl/connection.h"

namespace cubed::cubectl {
namespace {

constexpr char kUsage[] =
    R"(usage: cubectl [--address=unix:/path|host:port] [--json] [--quiet] [--timeout=30s]
               [--session=ID] [--tls_ca=PEM [--tls_cert=PEM --tls_key=PEM]]
               [--token_file=FILE] <command>

commands:
  info                          device info (backend, name, memory, limits, types, kernels)
  health                        grpc.health.v1 check; exit 0 when SERVING, 1 otherwise
  memory                        memory usage of the device
  stats                         request counts, latencies, memory, sessions, kernel cache
                                (--json: the whole GetStatsResponse)
  top [--count=N] [--interval=1s] [--sessions]
                                sessions, handles, memory and kernels/s, one line per device
                                every interval (like nvidia-smi dmon); --count=0: until killed;
                                --sessions: also a line per session with its own kernels/s
  cleanup                       return free pages to the device, print the usage after
  drain [--checkpoint]          stop the daemon for a restart; --checkpoint: write every
                                session to its --checkpoint_dir first (restore: --restore)
  session open [--lease=10m]    open a session that outlives cubectl; prints its ID
  session close ID              close a session, releasing its handles
  create FILE [--shape=2x3 --dtype=f32]
                                store a .npy or raw file; prints the handle (needs --session)
  read HANDLE [--shape=2x3 --dtype=f32] [-o FILE | --npy FILE]
                                read a handle to a raw or .npy file, or print its values
                                (a progress bar on stderr for big reads when it is a terminal;
                                --quiet: none)
  run KERNEL --dtype=f32 [--axis=N] [--out-dtype=T] [--index-dtype=i32|i64] --in=H:SHAPE...
      --out=H:SHAPE|new:SHAPE...
      [--scalar=V...]           run a builtin kernel on contiguous tensors
  profile KERNEL ...            like run, and print the device time it took
  trace --session=ID [--for=10s] [--max-events=100000] [-o FILE]
                                record what the session runs for a while, as Chrome
                                trace-event JSON (Perfetto, chrome://tracing); stdout without -o
  completion bash|zsh           a shell completion script for every command and flag:
                                source <(cubectl completion bash)

The default address is $CUBED_ADDRESS; else unix:$XDG_RUNTIME_DIR/cubed.sock (or
unix:/tmp/cubed-$UID/cubed.sock) when it exists; else the service's unix:/run/cubed/cubed.sock
when that exists.
For TCP: --tls_ca (and --tls_cert/--tls_key for mTLS) for a TLS daemon; --token_file holds the
bearer token (else $CUBED_TOKEN). docs/security.md.
)";

absl::Status Run(int argc, char** argv) {
  absl::StatusOr<CommandLine> line = ParseCommandLine(argc, argv);
  if (!line.ok()) return line.status();
  if (line->help) {
    std::cout << kUsage;
    return absl::OkStatus();
  }
  absl::StatusOr<GlobalOptions> global = ParseGlobalOptions(line->args);
  if (!global.ok()) return global.status();
  return line->command->run(Context{*global, std::move(line->args), &std::cout});
}

}  // namespace
}  // namespace cubed::cubectl

int main(int argc, char** argv) {
  const absl::Status status = cubed::cubectl::Run(argc, argv);
  std::cout.flush();
  if (status.ok()) return 0;
  if (cubed::cubectl::IsUsageError(status)) {
    std::cerr << "cubectl: " << status.message() << "\nrun 'cubectl --help' for usage\n";
    return 2;
  }
  std::cerr << "cubectl: " << absl::StatusCodeToString(status.code()) << ": " << status.message()
            << "\n";
  return 1;
}
