#!/usr/bin/env bash
# grpcurl against the daemon's TLS listener with a bearer token, as an operator would
# (docs/security.md): reflection works over TLS, a call with the token succeeds, a call without
# it or with a wrong one is Unauthenticated, and a plaintext client is refused.
#
#   grpcurl_tls_test.sh CUBED_BINARY MAKE_CERTS_SH
# Exit 77 (skip) when grpcurl is missing (deploy/setup.sh installs it).
set -euo pipefail
cubed=${1:?cubed binary}
make_certs=${2:?make_certs.sh}
command -v grpcurl >/dev/null || { echo "grpcurl not found: skipped"; exit 77; }

dir=$(mktemp -d /tmp/cubed-grpcurl-tls-XXXXXX)
pid=
cleanup() {
  if [[ -n $pid ]]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; echo "--- daemon log"; cat "$dir/log"; exit 1; }

"$make_certs" "$dir/certs"
token=ops-token-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
printf 'ops %s\n' "$token" >"$dir/tokens"
chmod 600 "$dir/tokens"
cat >"$dir/auth.textproto" <<CONF
token_file: "tokens"
principal { name: "ops" permissions { all_rpcs: true } }
CONF

"$cubed" --backend=cpu --listen="$dir/cubed.sock" --tcp=127.0.0.1:0 \
  --tls_cert="$dir/certs/server.pem" --tls_key="$dir/certs/server.key" \
  --auth_config="$dir/auth.textproto" --ready_file="$dir/ready" 2>"$dir/log" &
pid=$!
for _ in $(seq 1 200); do
  grep -q '^tcp=' "$dir/ready" 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || fail "cubed exited"
  sleep 0.05
done
addr=$(sed -n 's/^tcp=//p' "$dir/ready")
[[ -n $addr ]] || fail "no tcp= line in the ready file"

tls=(-cacert "$dir/certs/ca.pem" -max-time 20)
out=$(grpcurl "${tls[@]}" "$addr" list 2>&1) || fail "grpcurl list over TLS: $out"
grep -q cubed.v1.Compute <<<"$out" || fail "list does not show cubed.v1.Compute: $out"

out=$(grpcurl "${tls[@]}" -H "authorization: Bearer $token" "$addr" cubed.v1.Compute/GetInfo 2>&1) ||
  fail "GetInfo with the token: $out"
grep -q '"backend": "BACKEND_CPU"' <<<"$out" || fail "GetInfo answer: $out"

out=$(grpcurl "${tls[@]}" -H "authorization: Bearer $token" -d '{}' "$addr" \
  cubed.v1.Compute/OpenSession 2>&1) || fail "OpenSession with the token: $out"
grep -q '"session"' <<<"$out" || fail "OpenSession answer: $out"

if out=$(grpcurl "${tls[@]}" "$addr" cubed.v1.Compute/GetInfo 2>&1); then
  fail "GetInfo without a token succeeded: $out"
fi
grep -q 'Unauthenticated' <<<"$out" || fail "GetInfo without a token: $out"

if out=$(grpcurl "${tls[@]}" -H "authorization: Bearer wrong-$token" "$addr" \
  cubed.v1.Compute/GetInfo 2>&1); then
  fail "GetInfo with a wrong token succeeded: $out"
fi
grep -q 'Unauthenticated' <<<"$out" || fail "GetInfo with a wrong token: $out"

if out=$(grpcurl -plaintext -max-time 5 -H "authorization: Bearer $token" "$addr" \
  cubed.v1.Compute/GetInfo 2>&1); then
  fail "a plaintext client was served by the TLS listener: $out"
fi
grep -q "$token" "$dir/log" && fail "the token appears in the daemon's log"
echo "PASS"
