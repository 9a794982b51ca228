#!/usr/bin/env bash
# The device loop's CPU per command on a GPU host, two daemons alternated, from `perf` samples:
# how runs 82-83 (docs/gpu-runs.md) compare daemons there, where P2's rates swing +-20% between
# two equal daemons but the loop's samples per command do not.
#
#   tests/bench/gpu_loop_ab.sh pack DAEMON_A DAEMON_B [OUT_TAR]   (here: builds the carry)
#   tests/bench/gpu_loop_ab.sh run [ROUNDS]                         (there, in the run's command)
#
# pack: strips the two daemons (kept as cubed-a and cubed-b, with their symbols), packs them with
#   build/tests/bench/cubed_gpu_bench, cubed_sdk_bench, this machine's perf and every library
#   they need (../shared/tools/device-pack.sh), adds libcubed_client_c.so (the Python SDK's
#   native core: CUBED_CLIENT_LIBRARY=$PWD/.device/lib/libcubed_client_c.so there), and
#   compresses the folder into OUT_TAR (default .perfab/device.tar.xz; perf's libraries put the
#   plain folder past the 64 MiB carry limit).
#   Carry OUT_TAR's folder; on the GPU machine run:
#     tar -xJf .perfab/device.tar.xz && . .device/env.sh && bash .device/extra/gpu_loop_ab.sh run
# run: ROUNDS (default 2) alternations of `perf record -F 2000 -a` around `cubed_gpu_bench
#   --only=3 --repeats=3 --execute_count=20000` (P2 and P2s: 660,000 fills) with each daemon;
#   prints per daemon and round the loop's and the ring thread's samples (0.5 ms each; the same
#   command count for both daemons, so their ratio is the ratio of CPU per command) and the P2 /
#   P2s rows, and writes each daemon's heaviest loop symbols of the last round to $OUT.
#   BACKEND=cpu runs it against the CPU backend (a check of the script on a machine without GPU).
set -euo pipefail

case ${1:-} in
  pack)
    (($# >= 3)) || { sed -n '2,20p' "$0"; exit 2; }
    a=$2 b=$3 tar=${4:-.perfab/device.tar.xz}
    root=$(git rev-parse --show-toplevel)
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    strip --strip-debug -o "$work/cubed-a" "$a"
    strip --strip-debug -o "$work/cubed-b" "$b"
    strip --strip-all -o "$work/cubed_gpu_bench" "$root/build/tests/bench/cubed_gpu_bench"
    strip --strip-all -o "$work/cubed_sdk_bench" "$root/build/tests/bench/cubed_sdk_bench"
    cp "$(command -v perf)" "$work/perf"
    "$root/../shared/tools/device-pack.sh" "$work/cubed-a" "$work/cubed-b" \
      "$work/cubed_gpu_bench" "$work/cubed_sdk_bench" "$work/perf" -- "$0"
    strip --strip-debug -o .device/lib/libcubed_client_c.so \
      "$root/build/client/c_api/libcubed_client_c.so"
    mkdir -p "$(dirname "$tar")"
    tar -cJf "$tar" .device
    echo "packed $(du -h "$tar" | cut -f1) into $tar"
    ;;
  run)
    rounds=${2:-2}
    out=${OUT:-.}
    cd "$out"
    nvidia-smi --query-gpu=name --format=csv,noheader || true
    for ((r = 1; r <= rounds; ++r)); do
      for v in a b; do
        timeout 60 perf record -q -F 2000 -a -o "$v$r.data" -- cubed_gpu_bench \
          --cubed="$(command -v "cubed-$v")" --backend="${BACKEND:-cuda}" --only=3 --repeats=3 \
          --execute_count=20000 --execute_others=false >"$v$r.txt" 2>&1 || true
        samples() {
          perf report -i "$v$r.data" --comms "$1" --sort comm -n -g none --stdio 2>/dev/null |
            awk -v c="$1" '$1 !~ /^#/ && $3 == c {print $2}' || true
        }
        rows=$(grep -E '^(P2|P2s) ' "$v$r.txt" | awk -F'|' '{printf "%s %s / %s  ", $1, $4, $6}')
        echo "round $r daemon $v: loop_samples=$(samples cubed-loop)" \
          "ring_samples=$(samples cubed-ring) $rows"
        if ((r == rounds)); then
          { perf report -i "$v$r.data" --comms cubed-loop --sort dso,symbol -n -g none --stdio \
            2>/dev/null | grep -v '^#' | grep -v '^$' | head -45 | cut -c1-160 >"$v.loop.txt"; } ||
            true  # head closes the pipe early.
        fi
        rm -f "$v$r.data"
      done
    done
    ;;
  *)
    sed -n '2,20p' "$0"
    exit 2
    ;;
esac
