// cubectl completion bash|zsh: a completion script written from the command table (cli.h), so it
// knows every command and flag of this binary. zsh runs the bash script through bashcompinit.
//
// The script finds the command among the words before the cursor (skipping flags and the values
// of flags that take one), then completes: a flag's value after --flag= or --flag; a flag after
// "-"; else the command's operand (files for create), or the command words.

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cubectl/cli.h"
#include "common/elem_type.h"

namespace cubed::cubectl {
namespace {

std::string Dashed(const FlagSpec& flag) {
  return absl::StrCat(flag.name[1] == '\0' ? "-" : "--", flag.name);
}

// `compgen` arguments completing a value of `kind`; empty for none.
std::string CompgenFor(ValueKind kind) {
  switch (kind) {
    case ValueKind::kFile:
      return "-f";
    case ValueKind::kDtype: {
      std::vector<std::string> names;
      for (ElemType t : kAllElemTypes) names.emplace_back(ElemTypeName(t));
      return absl::StrCat("-W '", absl::StrJoin(names, " "), "'");
    }
    case ValueKind::kIndexDtype:
      return "-W 'i32 i64'";
    case ValueKind::kShell:
      return "-W 'bash zsh'";
    case ValueKind::kNone:
    case ValueKind::kText:
      break;
  }
  return "";
}

// The case arms mapping each flag that takes a value to its completion (or to none).
std::string ValueArms() {
  std::vector<std::string> arms;
  std::vector<FlagSpec> flags = GlobalFlags();
  for (const CommandSpec& command : Commands()) {
    flags.insert(flags.end(), command.flags.begin(), command.flags.end());
  }
  std::vector<std::string> seen;
  for (const FlagSpec& flag : flags) {
    if (flag.value == ValueKind::kNone) continue;
    const std::string name = Dashed(flag);
    if (std::find(seen.begin(), seen.end(), name) != seen.end()) continue;
    seen.push_back(name);
    const std::string compgen = CompgenFor(flag.value);
    arms.push_back(compgen.empty() ? absl::StrCat("    ", name, ") return 0 ;;\n")
                                   : absl::StrCat("    ", name, ") COMPREPLY=($(compgen ", compgen,
                                                  " -- \"$cur\")); return 0 ;;\n"));
  }
  return absl::StrJoin(arms, "");
}

std::string BashScript() {
  std::vector<std::string> global, valued, top_words;
  for (const FlagSpec& flag : GlobalFlags()) global.push_back(Dashed(flag));
  global.push_back("-h");
  std::string command_arms;
  std::string session_words;
  const auto add_valued = [&valued](const FlagSpec& flag) {
    if (flag.value == ValueKind::kNone) return;
    if (std::find(valued.begin(), valued.end(), Dashed(flag)) == valued.end()) {
      valued.push_back(Dashed(flag));
    }
  };
  for (const FlagSpec& flag : GlobalFlags()) add_valued(flag);
  for (const CommandSpec& command : Commands()) {
    const std::string name = command.name;
    const std::string first = name.substr(0, name.find(' '));
    if (std::find(top_words.begin(), top_words.end(), first) == top_words.end()) {
      top_words.push_back(first);
    }
    if (first != name)
      absl::StrAppend(&session_words, session_words.empty() ? "" : " ",
                      name.substr(name.find(' ') + 1));
    std::vector<std::string> flags;
    for (const FlagSpec& flag : command.flags) {
      flags.push_back(Dashed(flag));
      add_valued(flag);
    }
    const std::string operand = CompgenFor(command.operand);
    absl::StrAppend(&command_arms, "    '", name, "') flags='", absl::StrJoin(flags, " "),
                    "'; operand=\"", operand, "\" ;;\n");
  }
  return absl::StrCat(
      "# bash completion for cubectl, written by `cubectl completion bash`.\n"
      "# Use: source <(cubectl completion bash), or save it under\n"
      "# ~/.local/share/bash-completion/completions/cubectl.\n"
      "_cubectl() {\n"
      "  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}\n"
      "  local valued=' ",
      absl::StrJoin(valued, " "),
      " '\n"
      "  local command='' i=1 w\n"
      "  while (( i < COMP_CWORD )); do\n"
      "    w=${COMP_WORDS[i]}\n"
      "    if [[ $w == -* ]]; then\n"
      "      if [[ ${COMP_WORDS[i+1]} == = ]]; then (( i += 2 ));\n"
      "      elif [[ $valued == *\" $w \"* ]]; then (( i += 1 )); fi\n"
      "    elif [[ -z $command ]]; then command=$w\n"
      "    elif [[ $command == session ]]; then command=\"session $w\"\n"
      "    fi\n"
      "    (( i += 1 ))\n"
      "  done\n"
      "  local flag=''\n"
      "  if [[ $cur == = ]]; then flag=$prev; cur=''\n"
      "  elif [[ $prev == = ]]; then flag=${COMP_WORDS[COMP_CWORD-2]}\n"
      "  elif [[ $prev == -* && $valued == *\" $prev \"* ]]; then flag=$prev\n"
      "  fi\n"
      "  if [[ -n $flag ]]; then\n"
      "    case $flag in\n",
      ValueArms(),
      "    esac\n"
      "    return 0\n"
      "  fi\n"
      "  local flags='' operand=''\n"
      "  case $command in\n",
      command_arms,
      "  esac\n"
      "  if [[ $cur == -* ]]; then\n"
      "    COMPREPLY=($(compgen -W '",
      absl::StrJoin(global, " "),
      "'\" $flags\" -- \"$cur\"))\n"
      "  elif [[ -z $command ]]; then\n"
      "    COMPREPLY=($(compgen -W '",
      absl::StrJoin(top_words, " "),
      "' -- \"$cur\"))\n"
      "  elif [[ $command == session ]]; then\n"
      "    COMPREPLY=($(compgen -W '",
      session_words,
      "' -- \"$cur\"))\n"
      "  elif [[ -n $operand ]]; then\n"
      "    eval \"COMPREPLY=(\\$(compgen $operand -- \\\"\\$cur\\\"))\"\n"
      "  fi\n"
      "  return 0\n"
      "}\n"
      "complete -F _cubectl cubectl\n");
}

}  // namespace

absl::Status CompletionCommand(const Context& ctx) {
  const auto& words = ctx.args.positional();
  if (words.size() != 2 || (words[1] != "bash" && words[1] != "zsh")) {
    return UsageError("usage: cubectl completion bash|zsh");
  }
  if (words[1] == "zsh") {
    *ctx.out << "# zsh completion for cubectl: the bash script through bashcompinit.\n"
                "# Use: source <(cubectl completion zsh)\n"
                "autoload -U +X compinit && compinit\n"
                "autoload -U +X bashcompinit && bashcompinit\n";
  }
  *ctx.out << BashScript();
  return absl::OkStatus();
}

}  // namespace cubed::cubectl
