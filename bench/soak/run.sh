#!/usr/bin/env bash
# The soak (issue 45): three `geofaas node` processes (bench/soak/topology.toml: two Lisbon
# edges and a Frankfurt cloud) for an hour at 200 calls/s of mixed functions, a deploy every
# minute and the Belém edge restarted every ten minutes; see `geofaas loadtest soak --help`.
# Not a CI test: it runs for DURATION_S (default 3600) seconds.
#
# Usage: bench/soak/run.sh [OUT]        (default OUT: soak-out)
#   env: BIN=target/release/geofaas (built if missing), DURATION_S=3600, RATE=200, and any
#        further `geofaas loadtest soak` flags in SOAK_FLAGS.
# Writes OUT/windows.csv, failures.csv, resources.csv, events.csv, summary.json, soak.png and
# the nodes' logs under OUT/nodes.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=$(realpath -m "${1:-soak-out}")
BIN=${BIN:-$ROOT/target/release/geofaas}
if [[ ! -x $BIN ]]; then
  echo "== building $BIN"
  (cd "$ROOT" && cargo build --release -p geofaas)
fi
BIN=$(realpath "$BIN")
mkdir -p "$OUT"
echo "== soak: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown), $(nproc) cores, ${DURATION_S:-3600} s at ${RATE:-200} calls/s into $OUT"
# The nodes' process ids and open descriptors are read from /proc; the calls go over TLS to
# the nodes' loopback addresses.
ulimit -n 65536 2>/dev/null || true
exec "$BIN" loadtest soak --spawn --no-delays \
  --topology "$HERE/topology.toml" \
  --state-dir "$OUT/nodes" --out "$OUT" \
  --duration-s "${DURATION_S:-3600}" --rate "${RATE:-200}" \
  --restart-node belem ${SOAK_FLAGS:-}
