#!/usr/bin/env bash
# Installs cubed from the build tree into a temporary prefix, builds an outside project with
# find_package(cubed) against it, and runs that project against a real daemon.
#   package_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
daemon=""
tmp=$(mktemp -d)
trap '[[ -n $daemon ]] && kill $daemon 2>/dev/null; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cmake -S "$src/tests/package/consumer" -B "$tmp/consumer" -G Ninja \
  -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/consumer" >/dev/null
"$tmp/prefix/bin/cubed" --backend=cpu --listen="$tmp/cubed.sock" --ready_file="$tmp/ready" \
  2>"$tmp/log" &
daemon=$!
for _ in $(seq 200); do [[ -s $tmp/ready ]] && break; sleep 0.05; done
[[ -s $tmp/ready ]] || { cat "$tmp/log"; exit 1; }
out=$("$tmp/consumer/consumer" "unix:$tmp/cubed.sock")
[[ $out == "consumer says hello" ]] || { echo "unexpected output: $out"; exit 1; }
echo "package test: find_package(cubed) consumer built and talked to the installed daemon"
