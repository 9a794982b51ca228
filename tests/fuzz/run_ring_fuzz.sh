#!/usr/bin/env bash
# Runs a fuzzer that needs no seeds, cubed_fuzz_ring (fuzz_ring.cc) or cubed_fuzz_decoder
# (fuzz_decoder.cc), for FUZZ_RING_SECONDS (default 30; a -max_total_time among the extra flags
# overrides it) on a fresh corpus in WORK_DIR; crash-* reproducers land there. Exits non-zero when the fuzzer found a crash, leak,
# timeout or broken invariant.
#
#   run_ring_fuzz.sh FUZZER WORK_DIR [extra libFuzzer flags...]
set -uo pipefail
fuzzer=$(realpath "$1") work=$(realpath -m "$2")
shift 2
rm -rf "$work/corpus"
mkdir -p "$work/corpus" || exit 1
cd "$work" || exit 1
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
  "$fuzzer" -max_total_time="${FUZZ_RING_SECONDS:-30}" -timeout=10 -rss_limit_mb=2048 \
  -max_len=65536 -print_final_stats=1 -artifact_prefix="$work/" "$@" corpus >fuzz.log 2>&1
rc=$?
grep -E '^(stat::number_of_executed_units|stat::new_units_added|stat::peak_rss_mb)|cov: ' fuzz.log \
  | tail -4
if ((rc != 0)); then
  echo "run_ring_fuzz.sh: the fuzzer failed (exit $rc); log: $work/fuzz.log" >&2
  tail -60 fuzz.log >&2
fi
exit $rc
