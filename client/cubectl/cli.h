#pragma once

// cubectl's command line: one table of commands and their flags, parsed with CLI11. The shell
// completion scripts (completion_command.cc) are written from the same table, so a flag added
// here is parsed, checked and completed at once.

#include <vector>

#include "absl/status/statusor.h"
#include "client/cubectl/args.h"
#include "client/cubectl/commands.h"

namespace cubed::cubectl {

// What a flag's value or a command's operand is: how the shell completes it.
enum class ValueKind {
  kNone,        // A flag without a value (--json); a command without operands.
  kText,        // Anything: no completion.
  kFile,        // A path.
  kDtype,       // An element type name (f32, bf16, ...).
  kIndexDtype,  // i32 or i64.
  kShell,       // bash or zsh.
  kKernel,      // A builtin kernel of the daemon.
};

struct FlagSpec {
  const char* name;  // Without dashes: "dtype" is --dtype; one letter is a short flag ("o": -o).
  ValueKind value;
};

struct CommandSpec {
  const char* name;  // "info", or "session open" for two words.
  absl::Status (*run)(const Context&);
  ValueKind operand;            // kNone: the command takes no operands.
  std::vector<FlagSpec> flags;  // Beyond the global ones.
};

// Every command, in the order of `cubectl --help`.
const std::vector<CommandSpec>& Commands();
// The flags every command takes (--address, --json, ..., --help), before or after its name.
const std::vector<FlagSpec>& GlobalFlags();

// A parsed command line: the command to run with its Args, or a request for the usage text.
struct CommandLine {
  bool help = false;                     // --help or -h: print the usage, run nothing.
  const CommandSpec* command = nullptr;  // Set unless `help`.
  Args args;
};

// Parses argv[1..argc-1]. Flags come as --name=value, --name value or -o value. Usage error
// (args.h) naming what is wrong: no command, an unknown command or flag, a flag without its
// value, an argument the command does not take.
absl::StatusOr<CommandLine> ParseCommandLine(int argc, const char* const* argv);

}  // namespace cubed::cubectl
