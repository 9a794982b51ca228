#!/usr/bin/env bash
# Installs cubed as a systemd service: the daemon (and cubectl when built), the unit, the
# default flagfile and docs/operations.md; creates the system user and group `cubed`; reloads
# systemd. It enables nothing: it prints how to. Re-running it upgrades the binaries and the
# unit but never overwrites an edited /etc/cubed/cubed.flags (the new default goes beside it as
# cubed.flags.new). docs/operations.md describes the result.
#
#   deploy/install.sh [--build-dir=DIR] [--prefix=/usr/local] [--destdir=DIR]
#
#   --build-dir  where cubed was built (default: build; builds it there when missing)
#   --prefix     where the binaries go: PREFIX/bin (default /usr/local)
#   --destdir    stage everything under DIR instead of / (packaging, tests): no user is made,
#                systemd is not told
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
build_dir=$repo/build
prefix=/usr/local
destdir=

for arg in "$@"; do
  case $arg in
    --build-dir=*) build_dir=${arg#*=} ;;
    --prefix=*) prefix=${arg#*=} ;;
    --destdir=*) destdir=${arg#*=} ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "install.sh: unknown argument '$arg' (--help lists them)" >&2
      exit 2
      ;;
  esac
done
[[ $prefix == /* ]] || { echo "install.sh: --prefix must be absolute: '$prefix'" >&2; exit 2; }

if [[ ! -x $build_dir/server/cubed ]]; then
  echo "install.sh: building cubed in $build_dir"
  "$here/setup.sh"
  cmake -S "$repo" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$build_dir" --target cubed cubectl
fi

root=${destdir%/}
bindir=$prefix/bin
unit_dir=/etc/systemd/system
conf_dir=/etc/cubed
doc_dir=$prefix/share/doc/cubed

if [[ -z $destdir ]]; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "install.sh: run as root (or with --destdir=DIR to stage the files)" >&2
    exit 1
  fi
  # The service's own user: no login, no home. GPU access comes from the unit's
  # SupplementaryGroups=video render (and the driver's 0666 nodes where it installs them so).
  if ! getent group cubed >/dev/null; then
    groupadd --system cubed
    echo "install.sh: created group cubed"
  fi
  if ! getent passwd cubed >/dev/null; then
    useradd --system --gid cubed --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin --comment "cubed compute daemon" cubed
    echo "install.sh: created user cubed"
  fi
fi

install -D -m 0755 "$build_dir/server/cubed" "$root$bindir/cubed"
echo "install.sh: $bindir/cubed"
if [[ -x $build_dir/client/cubectl/cubectl ]]; then
  install -D -m 0755 "$build_dir/client/cubectl/cubectl" "$root$bindir/cubectl"
  echo "install.sh: $bindir/cubectl"
fi

# The unit, with ExecStart and Documentation pointing into this prefix.
tmp_unit=$(mktemp)
trap 'rm -f "$tmp_unit"' EXIT
sed -e "s#^ExecStart=/usr/local/bin/cubed #ExecStart=$bindir/cubed #" \
  -e "s#^Documentation=file:/usr/local/share/doc/cubed/#Documentation=file:$doc_dir/#" \
  "$here/systemd/cubed.service" >"$tmp_unit"
install -D -m 0644 "$tmp_unit" "$root$unit_dir/cubed.service"
echo "install.sh: $unit_dir/cubed.service"
install -D -m 0644 "$repo/docs/operations.md" "$root$doc_dir/operations.md"

# The flagfile: new installs get the default; an edited one stays, the new default beside it.
install -d -m 0755 "$root$conf_dir"
if [[ ! -e $root$conf_dir/cubed.flags ]]; then
  install -m 0644 "$here/cubed.flags" "$root$conf_dir/cubed.flags"
  echo "install.sh: $conf_dir/cubed.flags"
elif ! cmp -s "$here/cubed.flags" "$root$conf_dir/cubed.flags"; then
  install -m 0644 "$here/cubed.flags" "$root$conf_dir/cubed.flags.new"
  echo "install.sh: kept your $conf_dir/cubed.flags; the new default is $conf_dir/cubed.flags.new"
fi

if [[ -z $destdir && -d /run/systemd/system ]]; then
  systemctl daemon-reload
  if systemctl is-active --quiet cubed; then
    echo "install.sh: cubed is running the old binary: systemctl restart cubed"
  fi
fi

cat <<MSG
install.sh: done. To start cubed now and at every boot:
  systemctl enable --now cubed
  systemctl status cubed; journalctl -u cubed
Let a user reach /run/cubed/cubed.sock:  usermod -aG cubed USER  (then log in again)
  cubectl --address=unix:/run/cubed/cubed.sock health
Settings: $conf_dir/cubed.flags; see $doc_dir/operations.md
MSG
