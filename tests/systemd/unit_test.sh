#!/usr/bin/env bash
# Checks deploy/systemd/cubed.service, deploy/cubed.flags and deploy/install.sh without systemd
# running as PID 1:
#   1. `systemd-analyze verify` accepts the unit with no warning about it (unknown keys, bad
#      values, a missing binary) — and rejects a deliberately broken copy, so the check can fail;
#   2. `systemd-analyze security --offline` rates its exposure at most 2.5 ("OK"), so hardening
#      options do not disappear silently;
#   3. the daemon starts with the default flagfile (every flag in it exists and parses);
#   4. install.sh --destdir stages binary, unit, flagfile and docs; a second run keeps an edited
#      flagfile and puts the new default beside it.
# Usage: unit_test.sh CUBED_BINARY SOURCE_DIR BUILD_DIR. Exit 77 (skipped) without systemd-analyze.
set -uo pipefail

cubed=$1
src=$2
build=$3
unit=$src/deploy/systemd/cubed.service
flags=$src/deploy/cubed.flags

if ! command -v systemd-analyze >/dev/null; then
  echo "systemd-analyze is not installed (deploy/setup.sh installs systemd): skipped"
  exit 77
fi

tmp=$(mktemp -d /tmp/cubed-unit-test-XXXXXX)
pid=
cleanup() {
  [[ -n $pid ]] && kill -9 "$pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# verify_unit FILE: systemd-analyze verify must exit 0 and say nothing about FILE.
verify_unit() {
  local file=$1 name
  name=$(basename "$file")
  if ! systemd-analyze verify "$file" >"$tmp/verify.log" 2>&1; then
    cat "$tmp/verify.log"
    return 1
  fi
  if grep -F "$name" "$tmp/verify.log"; then return 1; fi
  return 0
}

# with_exec SOURCE BINARY OUT: the unit with ExecStart's program replaced by BINARY.
with_exec() {
  sed -E "s#^ExecStart=[^ ]+#ExecStart=$2#" "$1" >"$3"
  grep -q "^ExecStart=$2 --flagfile=/etc/cubed/cubed.flags\$" "$3"
}

# 1. verify.
mkdir -p "$tmp/units"
with_exec "$unit" "$cubed" "$tmp/units/cubed.service" || fail "unit has no ExecStart=... --flagfile=/etc/cubed/cubed.flags"
verify_unit "$tmp/units/cubed.service" || fail "systemd-analyze verify complains about the unit"
for key in Type=notify WatchdogSec= Restart=on-failure RuntimeDirectory=cubed StateDirectory=cubed \
  CacheDirectory=cubed User=cubed Group=cubed NoNewPrivileges=yes ProtectSystem=strict \
  ProtectHome=yes PrivateTmp=yes DevicePolicy=closed "DeviceAllow=char-nvidia\* rw"; do
  grep -q "^$key" "$unit" || fail "the unit lacks $key"
done
grep -q "^MemoryDenyWriteExecute=yes" "$unit" && fail "MemoryDenyWriteExecute=yes breaks the CUDA JIT"
grep -q "^PrivateDevices=yes" "$unit" && fail "PrivateDevices=yes hides the GPU nodes"

# The same check must catch a broken unit: an unknown key, a bad value, a missing binary.
mkdir -p "$tmp/broken"
sed 's/^Restart=on-failure/Restrat=on-failure/' "$tmp/units/cubed.service" >"$tmp/broken/typo.service"
sed 's/^Type=notify/Type=notfy/' "$tmp/units/cubed.service" >"$tmp/broken/value.service"
with_exec "$unit" "$tmp/no-such-cubed" "$tmp/broken/missing.service"
for b in typo value missing; do
  verify_unit "$tmp/broken/$b.service" >/dev/null && fail "verify accepted the broken unit $b.service"
done

# 2. exposure (systemd-analyze's threshold is the exposure level times 10).
if ! systemd-analyze security --offline=true --threshold=25 "$tmp/units/cubed.service" >"$tmp/security.log" 2>&1; then
  grep -E "Overall|✗" "$tmp/security.log"
  fail "systemd-analyze security rates the unit above 2.5"
fi

# 3. the default flagfile, with the paths that need root pointed into $tmp (later flags win).
"$cubed" --flagfile="$flags" --backend=cpu --listen="$tmp/cubed.sock" \
  --kernel_cache_dir="$tmp/kernels" --ready_file="$tmp/ready" 2>"$tmp/daemon.log" &
pid=$!
for _ in $(seq 200); do
  [[ -s $tmp/ready ]] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.05
done
if [[ -s $tmp/ready ]]; then
  kill -TERM "$pid"
  wait "$pid" || fail "cubed with the default flagfile exited with status $? on SIGTERM"
else
  cat "$tmp/daemon.log"
  fail "cubed did not start with deploy/cubed.flags"
  kill -9 "$pid" 2>/dev/null
fi
pid=

# 4. install.sh into a staging root.
stage=$tmp/root
if ! "$src/deploy/install.sh" --build-dir="$build" --destdir="$stage" --prefix=/opt/cubed >"$tmp/install.log" 2>&1; then
  cat "$tmp/install.log"
  fail "install.sh --destdir failed"
fi
[[ -x $stage/opt/cubed/bin/cubed ]] || fail "install.sh did not install the binary"
cmp -s "$stage/etc/cubed/cubed.flags" "$flags" || fail "install.sh did not install the flagfile"
[[ -f $stage/opt/cubed/share/doc/cubed/operations.md ]] || fail "install.sh did not install the docs"
installed=$stage/etc/systemd/system/cubed.service
grep -q "^ExecStart=/opt/cubed/bin/cubed --flagfile=/etc/cubed/cubed.flags$" "$installed" ||
  fail "the installed unit does not start /opt/cubed/bin/cubed"
mkdir -p "$tmp/installed"
with_exec "$installed" "$stage/opt/cubed/bin/cubed" "$tmp/installed/cubed.service"
verify_unit "$tmp/installed/cubed.service" || fail "systemd-analyze verify complains about the installed unit"

echo "--memory_limit=1GiB" >>"$stage/etc/cubed/cubed.flags"
cp "$stage/etc/cubed/cubed.flags" "$tmp/edited.flags"
"$src/deploy/install.sh" --build-dir="$build" --destdir="$stage" --prefix=/opt/cubed >"$tmp/install2.log" 2>&1 ||
  fail "the second install.sh failed"
cmp -s "$stage/etc/cubed/cubed.flags" "$tmp/edited.flags" || fail "install.sh overwrote an edited flagfile"
cmp -s "$stage/etc/cubed/cubed.flags.new" "$flags" || fail "install.sh did not put the new default beside it"
grep -q "kept your /etc/cubed/cubed.flags" "$tmp/install2.log" || fail "install.sh did not say it kept the flagfile"

if ((failures)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "unit, flagfile and install.sh: all checks passed"
