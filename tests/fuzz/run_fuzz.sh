#!/usr/bin/env bash
# Runs cubed_fuzz_requests for a bounded time on a fresh corpus grown from the generated seeds.
#
#   run_fuzz.sh FUZZER SEEDS_TOOL WORK_DIR [extra libFuzzer flags...]
#
# FUZZ_SECONDS (default 60) bounds the run. WORK_DIR gets seeds/, corpus/ (what the run found
# interesting) and, on a crash, crash-* reproducers; the last lines of the log are printed. Exits
# non-zero when the fuzzer found a crash, leak, timeout or invariant breach.
set -uo pipefail
fuzzer=$(realpath "$1") seeds_tool=$(realpath "$2") work=$(realpath -m "$3")
shift 3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

rm -rf "$work/seeds" "$work/corpus"
mkdir -p "$work/seeds" "$work/corpus" || exit 1
"$seeds_tool" "$work/seeds" || exit 1

cd "$work" || exit 1
# -use_counters=0: an edge counts once, not per hit count. The program mode runs many requests
# per input, so hit counts make nearly every input new and the corpus grows too fast for the
# inputs that climb towards an overflow (Note [Magnitude feedback], magnitude.h) to get enough
# mutations in a minute; the magnitude counters steer instead.
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
  "$fuzzer" -max_total_time="${FUZZ_SECONDS:-60}" -timeout=30 -rss_limit_mb=3072 \
  -max_len=16384 -use_counters=0 -print_final_stats=1 -dict="$here/requests.dict" \
  -artifact_prefix="$work/" "$@" corpus seeds >fuzz.log 2>&1
rc=$?
grep -E '^(stat::number_of_executed_units|stat::new_units_added|stat::peak_rss_mb)|cov: ' fuzz.log \
  | tail -5
if ((rc != 0)); then
  echo "run_fuzz.sh: the fuzzer failed (exit $rc); log: $work/fuzz.log" >&2
  tail -60 fuzz.log >&2
fi
exit $rc
