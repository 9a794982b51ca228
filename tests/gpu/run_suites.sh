#!/usr/bin/env bash
# Runs the suites that have a CUDA side on the GPU machine (docs/gpu-runs.md): the CUDA unit
# tests, the kernel conformance, the channel and compute suites, and the daemon-level suites
# against `--backend=cuda`. Expects the programs packed by ../shared/tools/device-pack.sh
# (`. .device/env.sh` first) and writes one log per suite plus summary.txt into $OUT (or ./out).
#
#   tests/gpu/run_suites.sh [SUITE...]     default: every suite below that was packed
set -uo pipefail
out=${OUT:-out}
mkdir -p "$out"
export CUBED_TEST_BACKEND=cuda
# The daemon-level suites start cubed by its build path unless told where it travelled (run 27
# lost them all to that).
if command -v cubed >/dev/null; then
  CUBED_BINARY=$(command -v cubed)
  export CUBED_BINARY
fi
# The IPC test's helper runs by its build path unless told where it travelled.
if command -v cubed_cuda_ipc_reader >/dev/null; then
  CUBED_CUDA_IPC_READER=$(command -v cubed_cuda_ipc_reader)
  export CUBED_CUDA_IPC_READER
fi
suites=("$@")
if ((${#suites[@]} == 0)); then
  suites=(cubed_cuda_tests cubed_cuda_daemon_tests cubed_cuda_kernels_tests cubed_compute_cpu_tests cubed_channel_tests
          cubed_integration_tests cubed_bad_input_tests cubed_stream_tests cubed_transfer_tests
          cubed_region_tests cubed_ring_tests cubed_systemd_tests cubectl_test)
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$out/gpu.txt" 2>&1
: >"$out/summary.txt"
status=0
for s in "${suites[@]}"; do
  command -v "$s" >/dev/null || { echo "$s: not packed" >>"$out/summary.txt"; continue; }
  start=$SECONDS
  "$s" >"$out/$s.log" 2>&1
  rc=$?
  passed=$(grep -c '^\[       OK \]' "$out/$s.log")
  skipped=$(grep -c '^\[  SKIPPED \]' "$out/$s.log")
  failed=$(grep -c '^\[  FAILED  \].*(' "$out/$s.log")
  summary=$(grep -E '^\[  PASSED  \]|tests? ran' "$out/$s.log" | tr '\n' ' ')
  echo "$s: rc=$rc passed=$passed skipped=$skipped failed=$failed $((SECONDS - start))s $summary" \
    >>"$out/summary.txt"
  ((rc == 0)) || status=1
done
cat "$out/gpu.txt" "$out/summary.txt"
exit $status
