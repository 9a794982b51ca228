#!/usr/bin/env bash
# Runs a conformance suite against the CUDA backend when this machine has one, else skips.
#   with_cuda.sh CUBED_BINARY TEST_BINARY [ARGS...]
# Exit 77 (ctest's skip code) when `cubed --backend=cuda` cannot start here (no driver, a stub
# library, no device); otherwise the suite's own exit code, run with CUBED_TEST_BACKEND=cuda.
set -uo pipefail
cubed=$1
shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$cubed" --backend=cuda --listen="$tmp/probe.sock" --ready_file="$tmp/ready" 2>"$tmp/log" &
pid=$!
for _ in $(seq 200); do
  [[ -s $tmp/ready ]] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.05
done
if [[ ! -s $tmp/ready ]]; then
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  echo "skipped: no CUDA backend on this machine: $(tail -1 "$tmp/log")"
  exit 77
fi
kill "$pid"
wait "$pid" 2>/dev/null
CUBED_TEST_BACKEND=cuda exec "$@"
