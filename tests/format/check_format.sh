#!/usr/bin/env bash
# Fails when a C, C++ or CUDA source of the project is not formatted as .clang-format says
# (Google style, 100 columns): lists the files and the command that fixes them. clang-format-14
# comes from deploy/setup.sh; other versions format differently, so exactly that one is used.
#
#   tests/format/check_format.sh PROJECT_ROOT
set -uo pipefail
root=${1:-.}
cd "$root" || exit 2
format=$(command -v clang-format-14 || true)
if [[ -z $format ]]; then
  echo "check_format: clang-format-14 is not installed (deploy/setup.sh installs it)" >&2
  exit 1
fi
mapfile -t files < <(git ls-files '*.cc' '*.c' '*.h' '*.cuh')
bad=()
for f in "${files[@]}"; do
  [[ -f $f ]] || continue
  "$format" --style=file --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  printf 'not formatted: %s\n' "${bad[@]}"
  echo "${#bad[@]} of ${#files[@]} files need: clang-format-14 -i --style=file FILE..."
  exit 1
fi
echo "format: ${#files[@]} files formatted"
