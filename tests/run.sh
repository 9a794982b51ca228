#!/usr/bin/env bash
# Runs every test: installs what is missing (deploy/setup.sh), builds `build` (RelWithDebInfo)
# and runs the whole ctest suite, then builds `build-asan` (-DCUBED_SANITIZE=ON: address and
# undefined-behaviour sanitizers) and runs the whole suite again, then builds `build-fuzz` (clang,
# -DCUBED_FUZZ=ON: only the libFuzzer targets and what they link) and fuzzes request validation for
# FUZZ_SECONDS (default 60), the command ring for FUZZ_RING_SECONDS (default 30) and the request
# decoder against protobuf for 30 s; counted as one test (tests/fuzz). Exits non-zero if any
# fails.
#
#   tests/run.sh            all three configurations (what CI runs)
#   tests/run.sh --no-asan  without the sanitizer configuration (quicker, for development)
#   tests/run.sh --no-fuzz  without the fuzz configuration
#
# Environment: JOBS (build parallelism, default nproc), CTEST_ARGS (extra ctest arguments,
# e.g. "-R bad_input").
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

asan=1 fuzz=1
for arg in "$@"; do
  case $arg in
    --no-asan) asan=0 ;;
    --no-fuzz) fuzz=0 ;;
    *) echo "usage: tests/run.sh [--no-asan] [--no-fuzz]" >&2; exit 2 ;;
  esac
done

bash deploy/setup.sh || { echo "tests/run.sh: deploy/setup.sh failed" >&2; exit 1; }

jobs=${JOBS:-$(nproc)}
read -r -a ctest_extra <<<"${CTEST_ARGS:-}"
start=$SECONDS
declare -A result
total_passed=0 total_failed=0 total_skipped=0

# suite NAME BUILD_DIR CMAKE_ARGS...: configures, builds and runs every test in BUILD_DIR.
# SUITE_TARGETS (space-separated), when set, builds only those targets; CTEST_EXCLUDE, when set,
# is a regular expression of tests not to run.
suite() {
  local name=$1 dir=$2
  shift 2
  local t0=$SECONDS
  echo "=== $name: configure + build ($dir) ==="
  if ! cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null; then
    echo "=== $name: configure FAILED ===" >&2
    return 1
  fi
  local targets=()
  [[ -n ${SUITE_TARGETS:-} ]] && read -r -a targets <<<"--target $SUITE_TARGETS"
  if ! cmake --build "$dir" -j"$jobs" "${targets[@]}"; then
    echo "=== $name: build FAILED ===" >&2
    return 1
  fi
  echo "=== $name: built in $((SECONDS - t0)) s; running ctest ==="
  local exclude=()
  [[ -n ${CTEST_EXCLUDE:-} ]] && exclude=(-E "$CTEST_EXCLUDE")
  ctest --test-dir "$dir" --output-on-failure --no-tests=error -j2 --timeout 300 \
    "${exclude[@]}" "${ctest_extra[@]}" 2>&1 | tee "$dir/ctest.log"
  local rc=${PIPESTATUS[0]}
  # "100% tests passed, 0 tests failed out of 42" and "<TAB>12 - name (Skipped)".
  local line
  line=$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$dir/ctest.log" | tail -1)
  if [[ $line =~ ([0-9]+)\ tests?\ failed\ out\ of\ ([0-9]+) ]]; then
    local failed=${BASH_REMATCH[1]} total=${BASH_REMATCH[2]}
    local skipped
    skipped=$(grep -cE '^[[:space:]]*[0-9]+ - .*\(Skipped\)$' "$dir/ctest.log")
    total_failed=$((total_failed + failed))
    total_skipped=$((total_skipped + skipped))
    total_passed=$((total_passed + total - failed - skipped))
  fi
  echo "=== $name: finished in $((SECONDS - t0)) s (ctest exit $rc) ==="
  return $rc
}

suite plain build
result[plain]=$?

if ((asan)); then
  # detect_leaks needs ptrace-like stop-the-world support; it works as root on our machines.
  # The benchmarks are not built and the NVRTC compile shards not run again: neither runs code of
  # ours that the plain configuration has not already run the same way (NVRTC is not
  # instrumented), and together they were a tenth of this configuration's time.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  CTEST_EXCLUDE='NvrtcBuiltinsTest' \
    suite sanitize build-asan -DCUBED_SANITIZE=ON -DCUBED_BUILD_BENCHMARKS=OFF \
      "-DCUBED_PYTHON_VENV=$root/build/tests/python_sdk/venv"
  result[sanitize]=$?
fi

if ((fuzz)); then
  # clang-14 and its fuzzer runtime come from deploy/setup.sh. The CUDA headers are hidden so that
  # this configuration builds only the CPU backend (the fuzz target drives a CPU device).
  CC=clang-14 CXX=clang++-14 SUITE_TARGETS="cubed_fuzz_requests cubed_fuzz_seeds cubed_fuzz_ring cubed_fuzz_decoder" \
    suite fuzz build-fuzz -DCUBED_FUZZ=ON -DCUBED_BUILD_TESTS=OFF \
      -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON "-DCMAKE_IGNORE_PATH=/usr/local/cuda/include;/usr/local/include"
  result[fuzz]=$?
fi

echo
echo "=== summary ($((SECONDS - start)) s) ==="
status=0
for name in plain sanitize fuzz; do
  [[ -v "result[$name]" ]] || continue
  if ((result[$name] == 0)); then
    echo "$name: passed"
  else
    echo "$name: FAILED"
    status=1
  fi
done
echo "tests: $total_passed passed, $total_failed failed, $total_skipped skipped"
exit $status
