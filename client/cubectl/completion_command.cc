// cubectl completion bash|zsh: a completion script written from the command table (cli.h), so it
// knows every command and flag of this binary. zsh runs the bash script through bashcompinit.
//
// The script finds the command among the words before the cursor (skipping flags and the values
// of flags that take one), then completes: a flag's value after --flag= or --flag; a flag after
// "-"; else the command's operand (files for create, the daemon's builtin kernels for run and
// profile), or the command words.

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
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
    case ValueKind::kKernel:
      return "kernel";  // The script asks the daemon (_cubectl_kernels).
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

// {{NAME}} is filled in by BashScript.
constexpr char kBashTemplate[] =
    R"bash(# bash completion for cubectl, written by `cubectl completion bash`.
# Use: source <(cubectl completion bash), or save it as
# ~/.local/share/bash-completion/completions/cubectl.

# The builtin kernels of the daemon at $1 (else the default address), asked by the cubectl $2
# with a short deadline; nothing when the daemon cannot be reached.
_cubectl_kernels() {
  local address=$1
  "$2" ${address:+--address="$address"} --timeout=1s --json info 2>/dev/null |
    sed -n 's/.*"builtin_kernels": \[\([^]]*\)\].*/\1/p' | tr -d '",'
}

_cubectl() {
  # The words before the cursor split at blanks only (COMP_WORDS splits at = and : too), and the
  # word being typed, whole (--dtype=b).
  local line=${COMP_LINE:0:COMP_POINT} words cur
  read -ra words <<< "$line"
  if [[ $line == *[[:space:]] ]]; then cur=''; else cur=${words[-1]}; unset 'words[-1]'; fi
  local valued=' {{VALUED}} '
  local command='' address='' i=1 w
  while (( i < ${#words[@]} )); do
    w=${words[i]}
    if [[ $w == -* ]]; then
      [[ $w == --address=* ]] && address=${w#--address=}
      if [[ $w != *=* && $valued == *" $w "* ]]; then
        [[ $w == --address ]] && address=${words[i+1]}
        (( i += 1 ))
      fi
    elif [[ -z $command ]]; then command=$w
    elif [[ $command == session ]]; then command="session $w"
    fi
    (( i += 1 ))
  done
  local flag='' prev=${words[-1]}
  if [[ $cur == -*=* ]]; then flag=${cur%%=*}; cur=${cur#*=}
  elif [[ $prev == -* && $prev != *=* && $valued == *" $prev "* ]]; then flag=$prev
  fi
  COMPREPLY=()
  if [[ -n $flag ]]; then
    case $flag in
{{VALUE_ARMS}}    esac
    return 0
  fi
  local flags='' operand=''
  case $command in
{{COMMAND_ARMS}}  esac
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W '{{GLOBAL_FLAGS}}'" $flags" -- "$cur"))
  elif [[ -z $command ]]; then
    COMPREPLY=($(compgen -W '{{COMMANDS}}' -- "$cur"))
  elif [[ $command == session ]]; then
    COMPREPLY=($(compgen -W '{{SESSION_WORDS}}' -- "$cur"))
  elif [[ $operand == kernel ]]; then
    COMPREPLY=($(compgen -W "$(_cubectl_kernels "$address" "${words[0]}")" -- "$cur"))
  elif [[ -n $operand ]]; then
    eval "COMPREPLY=(\$(compgen $operand -- \"\$cur\"))"
  fi
  return 0
}
complete -F _cubectl cubectl
)bash";

std::string BashScript() {
  std::vector<std::string> global, valued, commands, session_words;
  for (const FlagSpec& flag : GlobalFlags()) global.push_back(Dashed(flag));
  global.push_back("-h");
  const auto add_valued = [&valued](const FlagSpec& flag) {
    if (flag.value == ValueKind::kNone) return;
    if (std::find(valued.begin(), valued.end(), Dashed(flag)) == valued.end()) {
      valued.push_back(Dashed(flag));
    }
  };
  for (const FlagSpec& flag : GlobalFlags()) add_valued(flag);
  std::string command_arms;
  for (const CommandSpec& command : Commands()) {
    const std::string name = command.name;
    const size_t space = name.find(' ');
    const std::string first = name.substr(0, space);
    if (std::find(commands.begin(), commands.end(), first) == commands.end()) {
      commands.push_back(first);
    }
    if (space != std::string::npos) session_words.push_back(name.substr(space + 1));
    std::vector<std::string> flags;
    for (const FlagSpec& flag : command.flags) {
      flags.push_back(Dashed(flag));
      add_valued(flag);
    }
    absl::StrAppend(&command_arms, "    '", name, "') flags='", absl::StrJoin(flags, " "),
                    "'; operand=\"", CompgenFor(command.operand), "\" ;;\n");
  }
  return absl::StrReplaceAll(kBashTemplate,
                             {{"{{VALUED}}", absl::StrJoin(valued, " ")},
                              {"{{VALUE_ARMS}}", ValueArms()},
                              {"{{COMMAND_ARMS}}", command_arms},
                              {"{{GLOBAL_FLAGS}}", absl::StrJoin(global, " ")},
                              {"{{COMMANDS}}", absl::StrJoin(commands, " ")},
                              {"{{SESSION_WORDS}}", absl::StrJoin(session_words, " ")}});
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
