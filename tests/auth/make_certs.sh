#!/usr/bin/env bash
# Generates the certificates the auth tests use, into DIR (openssl from Debian):
#   ca.pem / ca.key          a test CA
#   server.pem / server.key  the daemon's certificate: CN=localhost, SAN IP:127.0.0.1, DNS:localhost
#   client.pem / client.key  a client certificate signed by the CA, CN=ci-client
#   stranger.pem / .key      signed by the CA, CN=stranger (a CN no principal names)
#   rogue-ca.pem, rogue.pem / rogue.key   a client certificate from another CA, CN=ci-client
# EC P-256 keys, valid for one day.
#
#   tests/auth/make_certs.sh DIR
set -euo pipefail
dir=${1:?usage: make_certs.sh DIR}
mkdir -p "$dir"
cd "$dir"
ec() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
ca() {  # NAME CN
  ec "$1.key"
  openssl req -x509 -new -key "$1.key" -subj "/CN=$2" -days 1 -out "$1.pem" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
}
leaf() {  # NAME CN CA EXTENSIONS
  ec "$1.key"
  openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr" 2>/dev/null
  printf '%s\n' "$4" >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -CAcreateserial -days 1 \
    -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
ca ca "cubed test CA"
ca rogue-ca "some other CA"
leaf server localhost ca "subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth"
leaf client ci-client ca "extendedKeyUsage=clientAuth"
leaf stranger stranger ca "extendedKeyUsage=clientAuth"
leaf rogue ci-client rogue-ca "extendedKeyUsage=clientAuth"
chmod 600 ./*.key
