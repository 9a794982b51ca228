#pragma once

// Every cubectl command. Each reads its operands and flags from `args` (positional()[0] is the
// command word; "session" has a second word), prints its report to `out` and returns the first
// error: a usage error (exit 2) or the SDK/daemon status (exit 1).

#include <cstdint>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "client/cubectl/args.h"
#include "client/cubectl/connection.h"
#include "cubed/v1/compute.pb.h"

namespace cubed::cubectl {

// What a command runs with: the parsed global flags, the whole command line and stdout.
struct Context {
  GlobalOptions global;
  Args args;
  std::ostream* out;
};

// device_commands.cc
absl::Status InfoCommand(const Context& ctx);
absl::Status MemoryCommand(const Context& ctx);
absl::Status CleanupCommand(const Context& ctx);

// health_command.cc: UNAVAILABLE naming the services that are not SERVING.
absl::Status HealthCommand(const Context& ctx);

// stats_command.cc: GetStats, the daemon's counters and gauges.
absl::Status StatsCommand(const Context& ctx);

// drain_command.cc: the Drain RPC; --checkpoint writes every session to --checkpoint_dir first.
absl::Status DrainCommand(const Context& ctx);

// top_command.cc: GetStats every --interval, one line per device with the rates since the last.
absl::Status TopCommand(const Context& ctx);

// completion_command.cc: prints the bash or zsh completion script (no daemon needed).
absl::Status CompletionCommand(const Context& ctx);

// session_commands.cc
absl::Status SessionOpenCommand(const Context& ctx);
absl::Status SessionCloseCommand(const Context& ctx);

// tensor_commands.cc
absl::Status CreateCommand(const Context& ctx);
absl::Status ReadCommand(const Context& ctx);

// run_commands.cc
absl::Status RunCommand(const Context& ctx);
absl::Status ProfileCommand(const Context& ctx);

// trace_command.cc: a traced profile of --session for --for, as Chrome trace-event JSON.
absl::Status TraceCommand(const Context& ctx);

}  // namespace cubed::cubectl
