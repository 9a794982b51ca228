#!/usr/bin/env bash
# P2 (pipelined tiny Execute) over the command ring and over TCP loopback, for one or more
# daemons alternated on one machine (docs/gpu-runs.md; Note [Coalesced batches] in
# server/service/stream/stream_batch.cc says why the two carriers are compared). Expects the
# programs packed by ../shared/tools/device-pack.sh (`. .device/env.sh` first): cubed_gpu_bench,
# and each daemon named on the command line. Prints cubed_gpu_bench's P2 rows per daemon and round.
#
#   tests/gpu/p2_carriers.sh [--rounds=N] DAEMON...     e.g. cubed-old cubed
set -uo pipefail
rounds=2
if [[ ${1:-} == --rounds=* ]]; then
  rounds=${1#--rounds=}
  shift
fi
(($#)) || { sed -n '2,8p' "$0"; exit 2; }
command -v cubed_gpu_bench >/dev/null || { echo "cubed_gpu_bench is not on PATH" >&2; exit 2; }
for ((r = 1; r <= rounds; ++r)); do
  for daemon in "$@"; do
    path=$(command -v "$daemon") || { echo "$daemon: not found" >&2; exit 2; }
    # Measurement 3: P2 (ring), P2g (gRPC over a Unix socket), P2t (TCP), P2u (unary), P2s/P2ts.
    log=$(timeout 300 cubed_gpu_bench --cubed="$path" --only=3 --repeats=3 \
      --execute_count=20000 2>&1)
    rc=$?
    grep -E '^ *P2' <<<"$log" | sed "s|^|round $r $daemon: |"
    if ((rc != 0)); then
      echo "round $r $daemon: cubed_gpu_bench failed ($rc): $(tail -n 3 <<<"$log")" >&2
      exit 1
    fi
  done
done
