#!/usr/bin/env bash
# Builds cubed and runs the daemon in the foreground on the CPU backend, listening on a Unix
# socket in the runtime directory. Extra arguments pass through to cubed (e.g. --memory_limit=1GiB,
# --backend=auto to use a GPU, --tcp=127.0.0.1:50051 --insecure_tcp, which without --auth_config
# lets every process that reaches the port call every RPC; docs/security.md for TLS and tokens).
# Stop it with Ctrl-C.
#
#   deploy/run.sh [cubed flags...]
#
# Environment: BUILD_DIR (default build), CUBED_SOCKET (default $XDG_RUNTIME_DIR/cubed.sock, or
# /tmp/cubed-$UID/cubed.sock when XDG_RUNTIME_DIR is unset).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}

bash "$root/deploy/setup.sh"

if [[ ! -f $build/build.ninja ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
targets=(cubed)
if ninja -C "$build" -t targets all 2>/dev/null | grep -q '^cubectl:'; then targets+=(cubectl); fi
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"

if [[ -n ${CUBED_SOCKET:-} ]]; then
  socket=$CUBED_SOCKET
  mkdir -p "$(dirname "$socket")"
elif [[ -n ${XDG_RUNTIME_DIR:-} ]]; then
  socket=$XDG_RUNTIME_DIR/cubed.sock
  mkdir -p -m 0700 "$XDG_RUNTIME_DIR"
else
  dir=/tmp/cubed-$(id -u)
  mkdir -p -m 0700 "$dir"
  chmod 0700 "$dir"
  socket=$dir/cubed.sock
fi

cubectl=$(cd "$build" && find . -name cubectl -type f -perm -u+x -print -quit)
cubectl=${cubectl:+$build/${cubectl#./}}
cubectl=${cubectl:-cubectl}
cat <<EOF
cubed is starting on unix:$socket  (Ctrl-C stops it)

Talk to it with cubectl:
  $cubectl --address=unix:$socket info
  $cubectl --address=unix:$socket memory
  $cubectl --address=unix:$socket session open
or with grpcurl (reflection is on):
  grpcurl -plaintext -unix $socket list
  grpcurl -plaintext -unix $socket describe cubed.v1.Compute
  grpcurl -plaintext -unix $socket cubed.v1.Compute/GetInfo
  grpcurl -plaintext -unix $socket grpc.health.v1.Health/Check

EOF

exec "$build/server/cubed" --listen="$socket" --backend=cpu "$@"
