#!/usr/bin/env bash
# A CA and a P-256 certificate for 127.0.0.1 in folder $1 (ca.pem, cert.pem, key.pem), for the
# scale benchmarks' nodes. Usage: bench/scale/tls.sh DIR
set -euo pipefail
mkdir -p "$1"
cd "$1"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
  -subj "/CN=geofaas scale CA" -keyout ca-key.pem -out ca.pem 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=127.0.0.1" \
  -keyout key.pem -out cert.csr 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\n' > ext.cnf
openssl x509 -req -in cert.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 2 \
  -extfile ext.cnf -out cert.pem 2>/dev/null
