// cubectl: a command-line client of the cubed daemon. main only parses the command line and
// dispatches; each command lives in its group's file (commands.h).

#include <iostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/cubectl/args.h"
#include "client/cubectl/commands.h"
#include "client/cubectl/connection.h"

namespace cubed::cubectl {
namespace {

constexpr char kUsage[] =
    R"(usage: cubectl [--address=unix:/path|host:port] [--json] [--timeout=30s]
               [--session=ID] [--tls_ca=PEM [--tls_cert=PEM --tls_key=PEM]]
               [--token_file=FILE] <command>

commands:
  info                          device info (backend, name, memory, limits, types, kernels)
  health                        grpc.health.v1 check; exit 0 when SERVING, 1 otherwise
  memory                        memory usage of the device
  stats                         request counts, latencies, memory, sessions, kernel cache
                                (--json: the whole GetStatsResponse)
  cleanup                       return free pages to the device, print the usage after
  session open [--lease=10m]    open a session that outlives cubectl; prints its ID
  session close ID              close a session, releasing its handles
  create FILE [--shape=2x3 --dtype=f32]
                                store a .npy or raw file; prints the handle (needs --session)
  read HANDLE [--shape=2x3 --dtype=f32] [-o FILE | --npy FILE]
                                read a handle to a raw or .npy file, or print its values
  run KERNEL --dtype=f32 [--axis=N] [--out-dtype=T] [--index-dtype=i32|i64] --in=H:SHAPE...
      --out=H:SHAPE|new:SHAPE...
      [--scalar=V...]           run a builtin kernel on contiguous tensors
  profile KERNEL ...            like run, and print the device time it took
  trace --session=ID [--for=10s] [--max-events=100000] [-o FILE]
                                record what the session runs for a while, as Chrome
                                trace-event JSON (Perfetto, chrome://tracing); stdout without -o

The default address is $CUBED_ADDRESS; else unix:$XDG_RUNTIME_DIR/cubed.sock (or
unix:/tmp/cubed-$UID/cubed.sock) when it exists; else the service's unix:/run/cubed/cubed.sock
when that exists.
For TCP: --tls_ca (and --tls_cert/--tls_key for mTLS) for a TLS daemon; --token_file holds the
bearer token (else $CUBED_TOKEN). docs/security.md.
)";

struct CommandSpec {
  const char* name;  // "info", or "session open" for two words.
  absl::Status (*run)(const Context&);
  std::vector<absl::string_view> flags;  // Flags beyond the global ones.
};

const std::vector<CommandSpec>& Commands() {
  static const auto* commands = new std::vector<CommandSpec>{
      {"info", InfoCommand, {}},
      {"health", HealthCommand, {}},
      {"memory", MemoryCommand, {}},
      {"stats", StatsCommand, {}},
      {"cleanup", CleanupCommand, {}},
      {"session open", SessionOpenCommand, {"lease"}},
      {"session close", SessionCloseCommand, {}},
      {"create", CreateCommand, {"shape", "dtype"}},
      {"read", ReadCommand, {"shape", "dtype", "o", "npy"}},
      {"run", RunCommand, {"dtype", "out-dtype", "index-dtype", "axis", "in", "out", "scalar"}},
      {"profile",
       ProfileCommand,
       {"dtype", "out-dtype", "index-dtype", "axis", "in", "out", "scalar"}},
      {"trace", TraceCommand, {"for", "max-events", "o"}},
  };
  return *commands;
}

const CommandSpec* FindCommand(const std::vector<std::string>& words) {
  if (words.empty()) return nullptr;
  const std::string name =
      words[0] == "session" && words.size() > 1 ? absl::StrCat(words[0], " ", words[1]) : words[0];
  for (const auto& c : Commands()) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

absl::Status Run(int argc, char** argv) {
  absl::StatusOr<Args> args = Args::Parse(argc, argv);
  if (!args.ok()) return args.status();
  if (args->Has("help")) {
    std::cout << kUsage;
    return absl::OkStatus();
  }
  const CommandSpec* command = FindCommand(args->positional());
  if (command == nullptr) {
    return UsageError(args->positional().empty()
                          ? std::string("no command given")
                          : absl::StrCat("unknown command '", args->positional()[0], "'"));
  }
  std::vector<absl::string_view> allowed = {"address", "json",     "timeout", "session",
                                            "tls_ca",  "tls_cert", "tls_key", "token_file"};
  allowed.insert(allowed.end(), command->flags.begin(), command->flags.end());
  if (absl::Status s = args->CheckAllowed(allowed); !s.ok()) return s;
  absl::StatusOr<GlobalOptions> global = ParseGlobalOptions(*args);
  if (!global.ok()) return global.status();
  return command->run(Context{*global, *std::move(args), &std::cout});
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
