#include "client/cubectl/cli.h"

#include <map>
#include <string>
#include <utility>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace cubed::cubectl {
namespace {

using Flags = std::vector<std::pair<std::string, std::string>>;

std::string DashedName(const FlagSpec& flag) {
  return absl::StrCat(flag.name[1] == '\0' ? "-" : "--", flag.name);
}

// Registers `flag` on `app`. Each occurrence of a flag with a value takes exactly one argument,
// and every occurrence is kept (--in=... --in=...); Args::Get reads the last one.
CLI::Option* AddFlag(CLI::App& app, const FlagSpec& flag) {
  if (std::string(flag.name) == "help") return app.add_flag("-h,--help");
  if (flag.value == ValueKind::kNone) return app.add_flag(DashedName(flag));
  return app.add_option(DashedName(flag))
      ->type_size(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

struct Registered {
  const FlagSpec* spec;
  CLI::Option* option;
};

void Collect(const std::vector<Registered>& registered, Flags* flags) {
  for (const auto& [spec, option] : registered) {
    if (option->count() == 0) continue;
    if (spec->value == ValueKind::kNone) {
      flags->emplace_back(spec->name, "true");
    } else {
      for (const std::string& value : option->results()) flags->emplace_back(spec->name, value);
    }
  }
}

// One command as registered on the CLI11 app.
struct Leaf {
  const CommandSpec* spec;
  CLI::App* app;
  std::vector<Registered> flags;
  CLI::Option* operands = nullptr;
};

// CLI11 words "--lease: 1 required TEXT missing"; cubectl has always said "flag --lease needs a
// value".
absl::Status FromParseError(const CLI::ParseError& error) {
  const std::string what = error.what();
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&error) != nullptr &&
      absl::StrContains(what, "missing")) {
    return UsageError(absl::StrCat("flag ", what.substr(0, what.find(':')), " needs a value"));
  }
  return UsageError(what);
}

// The first argument CLI11 matched to nothing, worded for `leaf` (nullptr: no command named).
absl::Status ExtraArgumentError(const std::string& arg, const Leaf* leaf) {
  if (arg.size() > 1 && arg[0] == '-') {
    const absl::string_view name = absl::string_view(arg).substr(0, arg.find('='));
    return UsageError(absl::StrCat("unknown flag ", name, " for this command"));
  }
  if (leaf == nullptr) return UsageError(absl::StrCat("unknown command '", arg, "'"));
  return UsageError(absl::StrCat(leaf->spec->name, ": unexpected argument '", arg, "'"));
}

}  // namespace

const std::vector<FlagSpec>& GlobalFlags() {
  static const auto* flags = new std::vector<FlagSpec>{
      {"address", ValueKind::kText},    {"json", ValueKind::kNone},
      {"quiet", ValueKind::kNone},      {"timeout", ValueKind::kText},
      {"session", ValueKind::kText},    {"tls_ca", ValueKind::kFile},
      {"tls_cert", ValueKind::kFile},   {"tls_key", ValueKind::kFile},
      {"token_file", ValueKind::kFile}, {"help", ValueKind::kNone},
  };
  return *flags;
}

const std::vector<CommandSpec>& Commands() {
  static const auto* run_flags = new std::vector<FlagSpec>{{"dtype", ValueKind::kDtype},
                                                           {"out-dtype", ValueKind::kDtype},
                                                           {"index-dtype", ValueKind::kIndexDtype},
                                                           {"axis", ValueKind::kText},
                                                           {"in", ValueKind::kText},
                                                           {"out", ValueKind::kText},
                                                           {"scalar", ValueKind::kText}};
  static const auto* commands = new std::vector<CommandSpec>{
      {"info", InfoCommand, ValueKind::kNone, {}},
      {"health", HealthCommand, ValueKind::kNone, {}},
      {"memory", MemoryCommand, ValueKind::kNone, {}},
      {"stats", StatsCommand, ValueKind::kNone, {}},
      {"top",
       TopCommand,
       ValueKind::kNone,
       {{"count", ValueKind::kText},
        {"interval", ValueKind::kText},
        {"sessions", ValueKind::kNone}}},
      {"cleanup", CleanupCommand, ValueKind::kNone, {}},
      {"drain", DrainCommand, ValueKind::kNone, {{"checkpoint", ValueKind::kNone}}},
      {"session open", SessionOpenCommand, ValueKind::kNone, {{"lease", ValueKind::kText}}},
      {"session close", SessionCloseCommand, ValueKind::kText, {}},
      {"create",
       CreateCommand,
       ValueKind::kFile,
       {{"shape", ValueKind::kText}, {"dtype", ValueKind::kDtype}}},
      {"read",
       ReadCommand,
       ValueKind::kText,
       {{"shape", ValueKind::kText},
        {"dtype", ValueKind::kDtype},
        {"o", ValueKind::kFile},
        {"npy", ValueKind::kFile}}},
      {"run", RunCommand, ValueKind::kKernel, *run_flags},
      {"profile", ProfileCommand, ValueKind::kKernel, *run_flags},
      {"trace",
       TraceCommand,
       ValueKind::kNone,
       {{"for", ValueKind::kText}, {"max-events", ValueKind::kText}, {"o", ValueKind::kFile}}},
      {"completion", CompletionCommand, ValueKind::kShell, {}},
  };
  return *commands;
}

// CLI11 reports its errors by exceptions; they are caught here and never leave this function.
absl::StatusOr<CommandLine> ParseCommandLine(int argc, const char* const* argv) {
  CLI::App app("cubed's command-line client", "cubectl");
  // --help is one of the global flags (main prints the usage). Arguments CLI11 cannot place are
  // kept and reported below, in cubectl's words; global flags may follow a command's name.
  app.set_help_flag();
  app.allow_extras();
  app.fallthrough();
  std::vector<Registered> global;
  for (const FlagSpec& flag : GlobalFlags()) global.push_back({&flag, AddFlag(app, flag)});

  std::map<std::string, CLI::App*> groups;  // "session", the first word of two-word commands.
  std::vector<Leaf> leaves;
  for (const CommandSpec& command : Commands()) {
    const std::vector<std::string> words = absl::StrSplit(command.name, ' ');
    CLI::App* parent = &app;
    if (words.size() == 2) {
      CLI::App*& group = groups[words[0]];
      if (group == nullptr) group = app.add_subcommand(words[0])->allow_extras()->fallthrough();
      parent = group;
    }
    Leaf leaf{&command, parent->add_subcommand(words.back())->allow_extras()->fallthrough(), {}};
    for (const FlagSpec& flag : command.flags)
      leaf.flags.push_back({&flag, AddFlag(*leaf.app, flag)});
    if (command.operand != ValueKind::kNone) leaf.operands = leaf.app->add_option("operands");
    leaves.push_back(std::move(leaf));
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return FromParseError(error);
  }

  CommandLine line;
  Flags flags;
  Collect(global, &flags);
  for (const auto& [name, value] : flags) line.help |= name == "help";
  if (line.help) return line;

  const Leaf* chosen = nullptr;
  for (const Leaf& leaf : leaves) {
    if (!leaf.app->parsed()) continue;
    if (chosen != nullptr) {
      return UsageError(absl::StrCat("one command at a time: '", chosen->spec->name, "' and '",
                                     leaf.spec->name, "'"));
    }
    chosen = &leaf;
  }
  std::vector<std::string> extras;
  for (std::string& arg : app.remaining(/*recurse=*/true)) {
    if (arg != "--") extras.push_back(std::move(arg));
  }
  if (chosen == nullptr) {
    for (const auto& [word, group] : groups) {
      if (!group->parsed()) continue;
      return UsageError(extras.empty() || extras[0][0] == '-'
                            ? absl::StrCat("unknown command '", word, "'")
                            : absl::StrCat("unknown command '", word, " ", extras[0], "'"));
    }
    if (!extras.empty()) return ExtraArgumentError(extras[0], nullptr);
    return UsageError("no command given");
  }
  if (!extras.empty()) return ExtraArgumentError(extras[0], chosen);

  std::vector<std::string> positional = absl::StrSplit(chosen->spec->name, ' ');
  if (chosen->operands != nullptr) {
    for (const std::string& operand : chosen->operands->results()) positional.push_back(operand);
  }
  Collect(chosen->flags, &flags);
  line.command = chosen->spec;
  line.args = Args(std::move(positional), std::move(flags));
  return line;
}

}  // namespace cubed::cubectl
